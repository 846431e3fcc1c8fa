package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/loader"
	"github.com/dlbundle/dlbundle/loader/stagefmt"
)

// On a node whose glibc is not the image's (the stage's ldso record), a
// bundled program must start under the image's own ld.so, with the program
// as ld.so's argument (loader.UnderImageLdso). The Slurm plugin can change
// the path slurmstepd execs (argv[0]) but not add arguments, so on such a
// node it has slurmstepd start dlbundle in the task's place, with the
// task's environment already the shim's and this variable naming the
// program (its original path, as srun gave it); dlbundle then execs the
// image's ld.so. A node of the image's glibc never gets here: its tasks
// start as before, with no dlbundle process.
const (
	ldsoArgv0Var = "DLBUNDLE_LDSO_ARGV0" // the task's argv[0], as given
	ldsoProgVar  = "DLBUNDLE_LDSO_PROG"  // the program's original absolute path (a bare name found in the job's PATH), else argv[0]
)

// ldsoStart execs the program DLBUNDLE_LDSO_PROG (else DLBUNDLE_LDSO_ARGV0)
// names from the stage DLBUNDLE_STAGE names, under the image's ld.so, with
// argv0 as its argv[0] and dlbundle's own arguments as the program's. It
// does not return.
func ldsoStart(argv0 string) {
	prog := os.Getenv(ldsoProgVar)
	if prog == "" {
		prog = argv0
	}
	os.Unsetenv(ldsoArgv0Var) // the app's children are not started so
	os.Unsetenv(ldsoProgVar)
	stage := os.Getenv(loader.EnvStage)
	if !filepath.IsAbs(prog) || !filepath.IsAbs(stage) {
		fmt.Fprintf(os.Stderr, "dlbundle: %s=%q with %s=%q: not started by the Slurm plugin (both must be absolute paths); unset %s\n",
			ldsoProgVar, prog, loader.EnvStage, stage, ldsoArgv0Var)
		os.Exit(127)
	}
	file := filepath.Join(stage, stagefmt.RootDir, prog)
	path, argv, exe := loader.UnderImageLdso(stage, file, append([]string{argv0}, os.Args[1:]...))
	env := os.Environ()
	if exe != "" {
		env = append(slicesWithout(env, loader.EnvExe), loader.EnvExe+"="+exe)
	}
	err := unix.Exec(path, argv, env)
	fmt.Fprintf(os.Stderr, "dlbundle: cannot start %s from the stage %s: %v\n", prog, stage, err)
	os.Exit(127)
}

// slicesWithout is environ without NAME's entries.
func slicesWithout(environ []string, name string) []string {
	out := environ[:0:0]
	for _, kv := range environ {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

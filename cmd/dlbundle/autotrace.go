package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/internal/oneproc"
	"github.com/dlbundle/dlbundle/internal/outfile"
	"github.com/dlbundle/dlbundle/internal/trustpath"
)

// The Slurm plugin's --dlbundle=auto:DIR, for a command that has no image
// yet, has slurmstepd start dlbundle in place of the command in the step's
// first task (it can change the path slurmstepd execs, argv[0], but not add
// arguments): these variables say what to trace and where, and the other
// tasks run natively. When the traced task has ended the plugin runs
// dlbundle again, with DLBUNDLE_AUTO_BUILD, to build the image; later
// steps run from it. The plugin itself creates, opens and removes nothing:
// the auto dir, the trace, the image and the build log are made here, as
// the job's user, under the trust rule of every output (package outfile).
const (
	autoTraceVar   = "DLBUNDLE_AUTO_TRACE"   // the trace file to write
	autoArgv0Var   = "DLBUNDLE_AUTO_ARGV0"   // the command's own argv[0]
	autoBuildVar   = "DLBUNDLE_AUTO_BUILD"   // DIR/auto-<key>: build .dlimg from .trace.0, log to .log
	autoIncludeVar = "DLBUNDLE_AUTO_INCLUDE" // directories to bundle whatever build's policy says, one a line: the program's, a script's
)

// autoTrace traces the command the plugin replaced (its argv[0] from the
// environment, its arguments dlbundle's own) and exits with its status.
// The variables are taken off first: the app must not see them, nor start
// a second trace in a child that is dlbundle.
func autoTrace(out string) {
	argv0 := os.Getenv(autoArgv0Var)
	os.Unsetenv(autoTraceVar)
	os.Unsetenv(autoArgv0Var)
	if argv0 == "" {
		fmt.Fprintf(os.Stderr, "dlbundle: %s is set but %s is not: not started by the Slurm plugin's --dlbundle=auto; unset %s\n",
			autoTraceVar, autoArgv0Var, autoTraceVar)
		os.Exit(exitFailure)
	}
	oneproc.Restore()
	// The auto dir, made as mkdir -p would, by the rule of every output: no
	// component another user made in a directory every user can write. Its
	// last component is made 0700 (it holds traces: argv, every path
	// looked up), in the parent the walk trusted.
	dir := filepath.Dir(out)
	w := &trustpath.Walker{Rule: trustpath.Write, Uid: uint32(os.Geteuid()), Create: true}
	parent, err := w.WalkDir(filepath.Dir(dir))
	if err == nil {
		if e := unix.Mkdirat(parent.FD, parent.Name(filepath.Base(dir)), 0o700); e != nil && e != unix.EEXIST {
			err = e
		}
		parent.Close()
	}
	if err == nil {
		var d *trustpath.Dir
		if d, err = w.WalkDir(dir); err == nil {
			d.Close()
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlbundle: --dlbundle=auto: cannot use %s: %v; give a directory of yours: --dlbundle=auto:DIR\n", dir, err)
		os.Exit(exitFailure)
	}
	c := &TraceCmd{Output: out, Quiet: true, Command: append([]string{argv0}, os.Args[1:]...)}
	if err := c.Run(); err != nil { // Run exits with a failing app's status itself
		fmt.Fprintf(os.Stderr, "dlbundle trace (--dlbundle=auto): %v\n", err)
		os.Exit(exitFailure)
	}
	os.Exit(0)
}

// autoBuild builds base.dlimg from base.trace.0 (the traced task's trace),
// build's messages in base.log, and removes the trace when the image is
// written. Image and log are outputs like any other (outfile: the trust
// rule, a temporary file renamed when complete), so a later step never
// sees half an image, and a link someone placed at either name is
// replaced, not written through. Exits 0 when built, else 1 with the cause
// on stderr (the plugin copies it into slurmd's log).
func autoBuild(base string) {
	include := os.Getenv(autoIncludeVar)
	os.Unsetenv(autoBuildVar)
	os.Unsetenv(autoIncludeVar)
	oneproc.Restore()
	if !strings.HasPrefix(base, "/") {
		fmt.Fprintf(os.Stderr, "dlbundle: %s=%s: not an absolute path; set by the Slurm plugin's --dlbundle=auto only\n", autoBuildVar, base)
		os.Exit(exitFailure)
	}
	log, err := outfile.Create(base+".log", "build log", "--dlbundle=auto:DIR")
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlbundle: --dlbundle=auto: %v\n", err)
		os.Exit(exitFailure)
	}
	self, err := os.Executable()
	if err == nil {
		args := []string{"build", "-o", base + ".dlimg"}
		for _, dir := range strings.Split(include, "\n") {
			if dir != "" {
				args = append(args, "--include", dir)
			}
		}
		cmd := exec.Command(self, append(args, base+".trace.0")...)
		cmd.Stdout, cmd.Stderr = log.File, log.File
		err = cmd.Run()
	}
	if err != nil {
		fmt.Fprintf(log, "dlbundle: --dlbundle=auto: building %s.dlimg: %v; the next step traces again\n", base, err)
	}
	if cerr := log.Commit(outfile.Private()); cerr != nil {
		fmt.Fprintf(os.Stderr, "dlbundle: --dlbundle=auto: %v\n", cerr)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlbundle: --dlbundle=auto: building %s.dlimg failed (%v); its messages: %s.log\n", base, err, base)
		os.Exit(exitFailure)
	}
	// The trace is done with: removed from the directory the walk
	// trusted, by name in it.
	if last, err := trustpath.For(trustpath.Write).Walk(base + ".trace.0"); err == nil {
		if last.Exists && last.Node.Type() == unix.S_IFREG {
			unix.Unlinkat(last.Dir.FD, last.Dir.Name(last.Name), 0)
		}
		last.Close()
	}
	os.Exit(0)
}

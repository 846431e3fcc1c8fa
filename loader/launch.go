package loader

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/internal/abspath"
	"github.com/dlbundle/dlbundle/loader/stagefmt"
)

// Program is a process to start from a stage: the file the kernel executes,
// the argv the program sees and its environment. `dlbundle exec` execs it;
// `dlbundle env` prints its environment for a launcher that starts argv
// itself (the shim then serves the process the same way).
type Program struct {
	Path string
	Argv []string
	Env  []string
}

// StartError is a command that cannot be started. Status is what a shell
// would exit with: 127 for a command not found, 126 for one that cannot run.
type StartError struct {
	Status int
	Err    error
}

func (e *StartError) Error() string { return e.Err.Error() }
func (e *StartError) Unwrap() error { return e.Err }

// maxScriptDepth is the kernel's limit on nested #! interpreters.
const maxScriptDepth = 4

// Start returns the program that argv names, served from the published
// stage at stageDir with the shim in its environment (ShimEnv of environ).
// With stageDir "" it is the native program (--fallback): environ is kept
// as it is.
//
// argv[0] is looked up as execvp would, but the stage is asked first: a
// bundled executable runs from its staged copy, so finding it costs no
// operation on the shared file system, and argv[0] stays as given (the shim
// reports the original path in /proc/self/exe). A bundled "#!" script
// starts its interpreter as the kernel would (interpreter, optional
// argument, the script's path, argv[1:]), so that a bundled interpreter
// runs from the stage too.
func Start(stageDir string, argv []string, environ []string, opts EnvOptions) (*Program, error) {
	if len(argv) == 0 {
		return nil, &StartError{127, fmt.Errorf("no command to run")}
	}
	pathEnv := lookupEnv(environ, "PATH")
	if stageDir == "" {
		file, err := findNative(argv[0], pathEnv)
		if err != nil {
			return nil, &StartError{127, err}
		}
		return &Program{Path: file, Argv: argv, Env: environ}, nil
	}
	file, err := findCommand(stageDir, argv[0], pathEnv)
	if err != nil {
		return nil, &StartError{127, err}
	}
	if orig, ok := privilegedOriginal(stageDir, file); ok {
		// setuid or setgid: its original, without the shim (privileged.go)
		return &Program{Path: orig, Argv: argv, Env: environ}, nil
	}
	for depth := 0; ; depth++ {
		interp, arg, ok := stagedScript(stageDir, file)
		if !ok {
			break
		}
		if depth == maxScriptDepth {
			return nil, &StartError{126, fmt.Errorf("%s: too many levels of #! interpreters", argv[0])}
		}
		next := []string{interp}
		if arg != "" {
			next = append(next, arg)
		}
		argv = append(append(next, file), argv[1:]...)
		if file, err = findCommand(stageDir, interp, pathEnv); err != nil {
			return nil, &StartError{127, err}
		}
	}
	path, argv2 := underImageLdso(stageDir, file, argv)
	env := ShimEnv(stageDir, environ, opts)
	if path != file {
		// /proc/self/exe names ld.so now: the shim answers with this, and
		// the audit object takes the program's $ORIGIN from it.
		env = append(env, EnvExe+"="+strings.TrimPrefix(file, filepath.Join(stageDir, stagefmt.RootDir)))
	}
	return &Program{Path: path, Argv: argv2, Env: env}, nil
}

// underImageLdso starts a bundled, dynamically linked program under the
// image's own ld.so when the stage recorded that the node's is another
// glibc build (stagefmt.LdsoChoice, decided at staging): ld.so and libc.so.6
// of two builds cannot work together, and the kernel would take the node's
// ld.so from the program's PT_INTERP. ld.so is started with the program as
// its argument; from glibc 2.33 `--argv0` keeps argv[0] as given, before it
// the program's argv[0] is the staged path ld.so opened (docs/exec.md,
// "Images and nodes"). On a node with the image's glibc the only cost is the
// failed readlink of the record.
func underImageLdso(stageDir, file string, argv []string) (string, []string) {
	ldso, argv0, ok := stagefmt.ImageLdso(stageDir)
	if !ok || !strings.HasPrefix(file, filepath.Join(stageDir, stagefmt.RootDir)+"/") || !dynamicELF(file) {
		return file, argv
	}
	out := []string{ldso}
	if argv0 {
		out = append(out, "--argv0", argv[0])
	}
	return ldso, append(append(out, file), argv[1:]...)
}

// dynamicELF reports whether file is an ELF program with an interpreter.
func dynamicELF(file string) bool {
	f, err := elf.Open(file)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return true
		}
	}
	return false
}

func lookupEnv(environ []string, key string) string {
	for i := len(environ) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(environ[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

// findCommand finds cmd as execvp would, asking the stage before the file
// system. Names that are not bundled are looked up natively, in PATH order,
// so the first match wins as it would without dlbundle.
func findCommand(stage, cmd, pathEnv string) (string, error) {
	if strings.Contains(cmd, "/") {
		if staged, ok := stagedPath(stage, cmd); ok {
			return staged, nil
		}
		return cmd, nil
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			dir = "."
		}
		cand := filepath.Join(dir, cmd)
		if staged, ok := stagedPath(stage, cand); ok {
			return staged, nil
		}
		if _, _, ok := stagedScript(stage, cand); ok {
			return cand, nil
		}
		if stage != "" && ImageLacks(stage, cand) {
			continue // the image's listing of dir says no: no stat on the file system
		}
		if isExecutable(cand) {
			return cand, nil
		}
	}
	return "", fmt.Errorf("%s: command not found in PATH", cmd)
}

// stagedPath asks the stage about a command path made absolute without a
// file-system lookup (see abspath.Abs).
func stagedPath(stage, cmd string) (string, bool) {
	abs, err := abspath.Abs(cmd)
	if err != nil {
		return "", false
	}
	return StagedPath(stage, abs)
}

// stagedScript asks the stage whether cmd is a bundled "#!" script.
func stagedScript(stage, cmd string) (interp, arg string, ok bool) {
	abs, err := abspath.Abs(cmd)
	if err != nil {
		return "", "", false
	}
	return StagedScript(stage, abs)
}

// findNative is execvp's search, for --fallback.
func findNative(cmd, pathEnv string) (string, error) {
	if strings.Contains(cmd, "/") {
		return cmd, nil
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			dir = "."
		}
		if cand := filepath.Join(dir, cmd); isExecutable(cand) {
			return cand, nil
		}
	}
	return "", fmt.Errorf("%s: command not found in PATH", cmd)
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && unix.Access(path, unix.X_OK) == nil
}

// UnderImageLdso is underImageLdso for a launcher that has already chosen
// the staged program (file, inside stageDir's tree) and set the shim's
// environment (the Slurm plugin, through dlbundle: cmd/dlbundle's
// ldsostart.go): the path to execute, its argv, and the value of EnvExe
// when that path is the image's ld.so ("" otherwise).
func UnderImageLdso(stageDir, file string, argv []string) (path string, argv2 []string, exe string) {
	path, argv2 = underImageLdso(stageDir, file, argv)
	if path != file {
		exe = strings.TrimPrefix(file, filepath.Join(stageDir, stagefmt.RootDir))
	}
	return path, argv2, exe
}

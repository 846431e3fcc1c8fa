package trace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// StubVerb is the hidden dlbundle verb that runs StubMain.
const StubVerb = "__trace-stub"

// Exit codes for a command that cannot be run, as a POSIX shell uses them.
const (
	ExitNotFound      = 127
	ExitNotExecutable = 126
)

// StubMain runs in the re-executed dlbundle process, already traced by its
// parent (PTRACE_TRACEME): it installs the seccomp filter and execs the
// target. It returns only on failure, with the shell-style exit code to use.
// The filter cannot be installed by os/exec between fork and exec, which is
// why this stub exists.
func StubMain(argv []string) (code int, err error) {
	if len(argv) == 0 {
		return 2, errors.New("no command given")
	}
	path, code, err := ResolveCommand(argv[0])
	if err != nil {
		return code, err
	}
	prog, err := filterProgram()
	if err != nil {
		return 1, fmt.Errorf("assembling the seccomp filter: %w", err)
	}
	if err := loadFilter(prog); err != nil {
		return 1, fmt.Errorf("installing the seccomp filter: %w", err)
	}
	err = syscall.Exec(path, argv, os.Environ())
	// Only reached when execve failed.
	if errors.Is(err, syscall.ENOENT) {
		return ExitNotFound, fmt.Errorf("%s: %w", argv[0], err)
	}
	return ExitNotExecutable, fmt.Errorf("cannot execute %s: %w", path, err)
}

// ResolveCommand finds name like a shell does (PATH search unless it holds a
// slash) and returns the path to exec, or an error with exit code 127 (not
// found) or 126 (found but not executable).
func ResolveCommand(name string) (path string, code int, err error) {
	if strings.Contains(name, "/") {
		if fi, serr := os.Stat(name); serr == nil && fi.IsDir() {
			return "", ExitNotExecutable, fmt.Errorf("%s: is a directory", name)
		}
	}
	path, err = exec.LookPath(name)
	if err != nil && errors.Is(err, exec.ErrDot) {
		err = nil // "." in PATH: a shell would run it too
	}
	if err == nil {
		return path, 0, nil
	}
	if errors.Is(err, fs.ErrPermission) {
		return "", ExitNotExecutable, fmt.Errorf("%s: permission denied (not executable; chmod +x it or run it through its interpreter)", name)
	}
	if errors.Is(err, exec.ErrNotFound) {
		return "", ExitNotFound, fmt.Errorf("%s: command not found in PATH", name)
	}
	return "", ExitNotFound, fmt.Errorf("%s: %v", name, err)
}

// BecomeStubIfAsked turns the running program into the stub when it was
// started as `PROGRAM __trace-stub -- CMD ARGS` (and then never returns).
// Test binaries of packages that run real pilots call it first in TestMain,
// so that they need no built dlbundle.
func BecomeStubIfAsked() {
	if len(os.Args) > 2 && os.Args[1] == StubVerb {
		code, err := StubMain(os.Args[3:])
		fmt.Fprintf(os.Stderr, "dlbundle trace: %v\n", err)
		os.Exit(code)
	}
}

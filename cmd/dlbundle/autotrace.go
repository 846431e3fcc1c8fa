package main

import (
	"fmt"
	"os"

	"github.com/dlbundle/dlbundle/internal/oneproc"
)

// The Slurm plugin's --dlbundle=auto:DIR, for a command that has no image
// yet, has slurmstepd start dlbundle in place of the command in the step's
// first task (it can change the path slurmstepd execs, argv[0], but not add
// arguments): these variables say what to trace and where, and the other
// tasks run natively. The plugin builds the image from the trace when the
// step ends; later steps run from it.
const (
	autoTraceVar = "DLBUNDLE_AUTO_TRACE" // the trace file to write
	autoArgv0Var = "DLBUNDLE_AUTO_ARGV0" // the command's own argv[0]
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
	c := &TraceCmd{Output: out, Quiet: true, Command: append([]string{argv0}, os.Args[1:]...)}
	if err := c.Run(); err != nil { // Run exits with a failing app's status itself
		fmt.Fprintf(os.Stderr, "dlbundle trace (--dlbundle=auto): %v\n", err)
		os.Exit(exitFailure)
	}
	os.Exit(0)
}

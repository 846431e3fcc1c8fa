// Command dlbundle bundles what a dynamically linked or Python application
// loads into one image and serves every rank's start-up from a node-local copy.
//
// Each verb lives in its own file; this file only wires them into kong.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/alecthomas/kong"

	"github.com/dlbundle/dlbundle/internal/oneproc"
	"github.com/dlbundle/dlbundle/internal/stagetime"
	"github.com/dlbundle/dlbundle/internal/version"
)

// CLI is the command line. Verbs appear in --help in this order.
type CLI struct {
	Version kong.VersionFlag `short:"v" help:"Print the dlbundle version and exit."`

	Trace   TraceCmd   `cmd:"" help:"Pilot run: record every object the app loads (ptrace)."`
	Build   BuildCmd   `cmd:"" help:"Pack the objects of one or more traces into an image."`
	Exec    ExecCmd    `cmd:"" help:"Stage an image on this node and run the app from it."`
	Env     EnvCmd     `cmd:"" help:"Stage an image on this node and print the environment that serves a process from it (for launchers)."`
	Inspect InspectCmd `cmd:"" help:"Summarise or list an image."`
	Verify  VerifyCmd  `cmd:"" help:"Check an image's digests, or compare it with the file system."`
	Extract ExtractCmd `cmd:"" help:"Materialise an image's tree in a directory."`
	Report  ReportCmd  `cmd:"" help:"Summarise DLBUNDLE_REPORT files written by exec'd apps."`
	Push    PushCmd    `cmd:"" help:"Push an image to an OCI registry."`
	Pull    PullCmd    `cmd:"" help:"Pull an image from an OCI registry."`
	Stage   StageCmd   `cmd:"" help:"Stage an image on this node without running anything (prolog)."`
	Gc      GcCmd      `cmd:"" help:"Remove this node's stages that no running process uses (epilog)."`
	Ls      LsCmd      `cmd:"" help:"List this node's stages: size, last use, in use."`

	// Internal: the stub that installs the seccomp filter and execs the traced app.
	TraceStub TraceStubCmd `cmd:"" name:"__trace-stub" hidden:""`
	// Internal: the child that reads an image for root's stage --user, as the user.
	StageChild StageChildCmd `cmd:"" name:"__stage-child" hidden:""`
	// Internal: the Slurm plugin's srun side of --dlbundle-bcast (sbcast once per job).
	Bcast BcastCmd `cmd:"" name:"__bcast" hidden:""`

	// About dlbundle itself, last in --help.
	VersionCmd VersionCmd    `cmd:"" name:"version" help:"Print the dlbundle version (as --version, -v)."`
	HelpCmd    HelpCmd       `cmd:"" name:"help" help:"Show the help of dlbundle or of one command: dlbundle help exec."`
	Completion CompletionCmd `cmd:"" help:"Print a shell completion script: source <(dlbundle completion bash)."`
}

// exitError carries an exit status that is not a failure of dlbundle itself
// (for example the traced app's own status).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// newParser is dlbundle's kong parser for args (grammarFor); tests add
// options (kong.Exit).
func newParser(args []string, options ...kong.Option) (*kong.Kong, error) {
	return kong.New(grammarFor(args), append([]kong.Option{
		kong.Name("dlbundle"),
		kong.Description("Bundle what an HPC application loads at start-up into one image, " +
			"and serve every rank from a node-local copy of it.\n\n" +
			"  dlbundle trace -- ./myapp          # pilot run, writes ./dlbundle.trace\n" +
			"  dlbundle build -o app.dlimg        # pack the traced objects\n" +
			"  dlbundle exec app.dlimg -- ./myapp # in the job script, every rank\n\n" +
			"Exit status: 0 done, 1 failed, 2 usage error (nothing was done); " +
			"exec and trace exit with the app's status, verify documents its own."),
		kong.Vars{"version": version.Version},
	}, options...)...)
}

func main() {
	if out := os.Getenv(autoTraceVar); out != "" {
		autoTrace(out) // the Slurm plugin's --dlbundle=auto (autotrace.go); does not return
	}
	if base := os.Getenv(autoBuildVar); base != "" {
		autoBuild(base) // the same, once the traced task has ended; does not return
	}
	if base := os.Getenv(autoFoldVar); base != "" {
		autoFold(base) // the same, once a step served from the image has ended on a node (autofold.go)
	}
	if argv0 := os.Getenv(ldsoArgv0Var); argv0 != "" {
		ldsoStart(argv0) // the Slurm plugin, on a node of another glibc (ldsostart.go); does not return
	}
	// The version alone is answered before anything else: kong's model of
	// the whole command line (~0.3 ms of reflection and help text) and
	// oneproc.Restore's stop-the-world (which waits for a second thread to
	// be scheduled, ~1 ms on a busy node) are what --version cost, and
	// scripts and health checks run it often.
	if isVersionQuery(os.Args[1:]) {
		fmt.Println(version.Version)
		os.Exit(0)
	}
	stagetime.EnableFromEnv() // DLBUNDLE_STAGE_TIMING=1: where staging's time goes
	// Package init ran on one P (internal/oneproc). Only a warm exec and
	// the trace stub, which exec the app at once, stay there; exec
	// restores GOMAXPROCS itself when it has to stage.
	if len(os.Args) < 2 || os.Args[1] != "exec" && os.Args[1] != "__trace-stub" {
		oneproc.Restore()
	}
	// Every rank's exec and every pilot run: a plain command line is read
	// without kong (quickParse), which kong's model of the verb would cost.
	if verb, ok := quickParse(os.Args[1:], os.LookupEnv); ok {
		runningVerb = os.Args[1]
		lazy := func() *kong.Context { return kongContext(os.Args[1:]) }
		if err := checkArgs(verb, runningVerb); err != nil {
			fail(err, lazy)
		}
		fail(verb.Run(), lazy)
	}
	ctx := kongContext(os.Args[1:])
	runningVerb = verbName(ctx)
	if n := ctx.Selected(); n != nil {
		if err := checkArgs(n.Target.Interface(), runningVerb); err != nil {
			fail(err, func() *kong.Context { return ctx })
		}
	}
	fail(ctx.Run(), func() *kong.Context { return ctx })
}

// isVersionQuery says whether args ask for the version and nothing else
// (--version, -v, or the version verb), which kong would answer the same way.
func isVersionQuery(args []string) bool {
	return len(args) == 1 && (args[0] == "--version" || args[0] == "-v" || args[0] == "version")
}

// kongContext parses args (os.Args[1:]) with kong; a usage error is
// reported (exit 2).
func kongContext(args []string) *kong.Context {
	parser, err := newParser(args)
	if err != nil {
		panic(err) // the CLI struct is wrong: a bug, not a usage error
	}
	ctx, err := parse(parser, args)
	if err != nil {
		if bad := refBeforeParse(args); bad != nil {
			var pe *kong.ParseError
			if errors.As(err, &pe) {
				ctx = pe.Context // the verb reached, for the usage line
			}
			err = bad
		}
		reportUsage(ctx, err)
	}
	return ctx
}

// fail exits as err (a verb's Run's) says: 0 if nil, the app's status, a
// usage error's 2 (with the verb's usage from ctx), else 1 with the error.
func fail(err error, ctx func() *kong.Context) {
	if err == nil {
		os.Exit(0)
	}
	// kong wraps the error Run returns, so look through the chain.
	var e exitError
	if errors.As(err, &e) {
		os.Exit(e.code)
	}
	var u usageError
	if errors.As(err, &u) {
		reportUsage(ctx(), u)
	}
	if u := asMissingInput(err, ctx); u != nil {
		reportUsage(ctx(), u)
	}
	fmt.Fprintf(os.Stderr, "dlbundle %s: %v\n", verbName(ctx()), err)
	os.Exit(exitFailure)
}

// stripDashDash removes the leading "--" that kong keeps in passthrough args.
func stripDashDash(args []string) []string {
	if len(args) > 0 && args[0] == "--" {
		return args[1:]
	}
	return args
}

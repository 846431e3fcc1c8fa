package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"syscall"

	"github.com/dlbundle/dlbundle/internal/stagetime"
	"github.com/dlbundle/dlbundle/loader"
	"github.com/dlbundle/dlbundle/loader/stagefmt"
)

// EnvCmd stages an image on this node as exec does and prints the
// environment that serves a process from the stage, for a launcher that
// starts the processes itself (a shell, mpirun -x, a Slurm or Flux plugin).
type EnvCmd struct {
	StageFlags `embed:""`
	JSON       bool   `name:"json" help:"Same as --format=json (the flag every verb a script parses has)."`
	Format     string `default:"sh" enum:"sh,json,env0" placeholder:"FORMAT" help:"sh: 'export NAME=VALUE' lines (shell-quoted) for eval or a Slurm TaskProlog; json: {\"set\":{NAME:VALUE},\"unset\":[NAME]}; env0: NAME=VALUE entries, each ended by a NUL byte, NAME alone to unset (for C and Lua plugins)."`

	Image   string   `arg:"" name:"image" help:"The image: a file (app.dlimg) or oci://REGISTRY/REPO:TAG or oci://REGISTRY/REPO@sha256:DIGEST."`
	Command []string `arg:"" optional:"" name:"command" passthrough:"" help:"Optional, after --: a command to start from the stage; sh prints 'set -- STAGED ARGS...' after the variables (json: \"command\"), so that \"$@\" executes the staged copy and the kernel's execve never reads the original path."`
}

// Help is shown by 'dlbundle env --help' below the flags.
func (c *EnvCmd) Help() string {
	return `Stages IMAGE on this node exactly as 'dlbundle exec' would (same stage dir,
same lock, same stage: once per node and launch), then prints the variables
that make any process started with them run from the stage as under exec:
the loader shim (LD_AUDIT, LD_PRELOAD), DLBUNDLE_STAGE, and LD_LIBRARY_PATH
mapped to the stage. No launcher process stays between the site's launcher
and the app, and no second execve:

  eval "$(dlbundle env /lustre/me/app.dlimg)"
  ./myapp input.nml                 # served from the stage

  # Open MPI in a batch job: stage once per node, then -x NAME=VALUE each
  mpirun --map-by ppr:1:node dlbundle stage -q app.dlimg
  dlbundle env --format=env0 app.dlimg > vars      # this node finds the stage
  x=(); while IFS= read -r -d '' kv; do x+=(-x "$kv"); done < vars
  mpirun "${x[@]}" ./myapp                # examples/jobs/openmpi-env.sh

Under Slurm and Flux the plugins do this for you:
  srun --dlbundle=app.dlimg ./myapp
  flux run -o dlbundle=app.dlimg ./myapp

The stage's path is the same on every node when the stage dir is (no %n,
%h): then one node's output serves them all.

Every process started with the variables is served, the shell's later
commands too: run 'eval "$(dlbundle env ...)"' in a subshell or a job step,
not in your login shell. The program named on the command line is opened by
the launcher itself (from its path as given; the Slurm plugin gives
slurmstepd the staged copy); everything it loads after that comes from the
stage. On failure nothing is printed on stdout and the exit status is 1.

With a command after --, the command is looked up as exec looks it up (the
stage first, then PATH) and printed after the variables, as the staged copy
a script or mpirun can execute, so that not even the kernel's execve of the
program reads the shared file system:

  eval "$(dlbundle env app.dlimg -- ./myapp input.nml)"   # export ...; set -- /stage/.../myapp input.nml
  mpirun "${x[@]}" "$@"

argv[0] is then the staged path (a launcher that can set argv[0] on its own
takes --format=json's "command" with "argv0", the path as given).
See docs/exec.md ("Which way when") and docs/loader.md.`
}

// Run stages, then prints the variables.
func (c *EnvCmd) Run() error {
	if c.JSON { // refused before staging, not after
		if c.Format != "sh" && c.Format != "json" {
			return usageError{fmt.Sprintf("--json and --format=%s: give one of them", c.Format)}
		}
		c.Format = "json"
	}
	if err := c.checkInputs(); err != nil {
		return err
	}
	argv := stripDashDash(c.Command)
	if len(argv) > 0 && c.Format == "env0" {
		return usageError{"--format=env0 and a command: env0 holds variables only; use sh or json to get the staged command"}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	staged, err := ensureStage(ctx, "env", c.ensureRequest(c.Image))
	stagetime.Report(os.Stderr) // DLBUNDLE_STAGE_TIMING=1
	if ctx.Err() != nil {
		return fmt.Errorf("%w during staging; no environment printed", context.Cause(ctx))
	}
	environ := os.Environ()
	after := environ
	if err == nil {
		// As under exec: with no --report, the processes leave what they
		// passed to the file system in the node's records (reportTarget
		// names the run in this process's environment, so the diff below
		// carries DLBUNDLE_RUN and the record's bound too).
		c.Report = reportTarget(c.Report, staged.Dir, c.Image, nil)
	}
	if err != nil {
		if !c.Fallback {
			return fmt.Errorf("%w %s", err, fallbackHint())
		}
		fmt.Fprintf(os.Stderr, "dlbundle env: warning: %v; printing no variable: the app runs natively (--fallback)\n", err)
	} else {
		after = loader.ShimEnv(staged.Dir, os.Environ(), loader.EnvOptions{Report: c.Report, Debug: c.Debug})
	}
	set, unset := envDiff(environ, after)
	var cmd *loader.Program
	if len(argv) > 0 {
		dir := ""
		if staged != nil && err == nil {
			dir = staged.Dir
		}
		// exec's own lookup (loader.Start): a bundled executable becomes its
		// staged copy, a bundled script its staged interpreter, anything
		// else the path execvp would find.
		p, serr := loader.Start(dir, argv, environ, loader.EnvOptions{})
		if serr != nil {
			return fmt.Errorf("%w; no environment printed", serr)
		}
		cmd = p
		// Under the image's own ld.so (a node with another glibc):
		// /proc/self/exe names ld.so, and the shim takes the program from
		// DLBUNDLE_EXE (docs/exec.md, "Images and nodes").
		ldso, _, cross := stagefmt.ImageLdso(dir)
		cross = cross && dir != ""
		for _, kv := range p.Env {
			if v, ok := strings.CutPrefix(kv, loader.EnvExe+"="); ok && cross && p.Path == ldso {
				set = append(set, envVar{loader.EnvExe, v})
				unset = slices.DeleteFunc(unset, func(k string) bool { return k == loader.EnvExe })
			}
		}
	} else if staged != nil && err == nil {
		if _, _, cross := stagefmt.ImageLdso(staged.Dir); cross {
			// The variables alone cannot choose the ld.so: the kernel
			// takes it from the program's PT_INTERP, the node's, and the
			// shim then gives that process the node's glibc: a bundled
			// program started by its path runs with the node's libc.
			fmt.Fprintf(os.Stderr, "dlbundle env: warning: %s was built on a node with another glibc than this one's: "+
				"a bundled program started by its original path runs under this node's ld.so and glibc, not the image's; "+
				"use `dlbundle env %s -- CMD ARGS...` and execute the command it prints (\"$@\"), which starts the image's ld.so\n", c.Image, c.Image)
		}
	}
	out, err := formatEnv(c.Format, set, unset, cmd)
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(out)
	return err
}

// launcherEnv names the launcher plugin that runs env for its tasks
// ("slurm"), so that the one hint a user reads names that launcher's own
// option, not env's.
const launcherEnv = "DLBUNDLE_LAUNCHER"

// fallbackHint is the way to run the app natively when staging fails, in
// the words of whoever ran env.
func fallbackHint() string {
	switch os.Getenv(launcherEnv) {
	case "slurm":
		return "(srun --dlbundle-fallback runs the tasks natively instead)"
	default:
		return "(use --fallback to print no variable, so that the app runs natively, when staging fails)"
	}
}

// envVar is one variable to set.
type envVar struct{ name, value string }

// envDiff returns what turns environ into after: the variables to set (in
// after's order: LD_LIBRARY_PATH first, then the shim's) and those to unset.
func envDiff(environ, after []string) (set []envVar, unset []string) {
	before := map[string]string{}
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		before[k] = v
	}
	kept := map[string]bool{}
	for _, kv := range after {
		k, v, _ := strings.Cut(kv, "=")
		kept[k] = true
		if old, ok := before[k]; !ok || old != v {
			set = append(set, envVar{k, v})
		}
	}
	for k := range before {
		if !kept[k] {
			unset = append(unset, k)
		}
	}
	sort.Strings(unset)
	return set, unset
}

// formatEnv writes the variables in one of env's formats.
// A command (cmd, or nil) follows the variables: sh's "set -- PATH ARGS",
// json's "command" (the argv to execute, its first the file to execute)
// with "argv0", the name as given.
func formatEnv(format string, set []envVar, unset []string, cmd *loader.Program) ([]byte, error) {
	var b bytes.Buffer
	switch format {
	case "json":
		m := map[string]string{}
		for _, v := range set {
			m[v.name] = v.value
		}
		if unset == nil {
			unset = []string{}
		}
		var command []string
		argv0 := ""
		if cmd != nil {
			command = append([]string{cmd.Path}, cmd.Argv[1:]...)
			argv0 = cmd.Argv[0]
		}
		j, err := json.Marshal(struct {
			Set     map[string]string `json:"set"`
			Unset   []string          `json:"unset"`
			Command []string          `json:"command,omitempty"`
			Argv0   string            `json:"argv0,omitempty"`
		}{m, unset, command, argv0})
		if err != nil {
			return nil, err
		}
		b.Write(j)
		b.WriteByte('\n')
	case "env0":
		for _, v := range set {
			b.WriteString(v.name + "=" + v.value + "\x00")
		}
		for _, k := range unset {
			b.WriteString(k + "\x00")
		}
	default:
		for _, v := range set {
			fmt.Fprintf(&b, "export %s=%s\n", v.name, shellQuote(v.value))
		}
		for _, k := range unset {
			fmt.Fprintf(&b, "unset %s\n", k)
		}
		if cmd != nil {
			b.WriteString("set --")
			for _, a := range append([]string{cmd.Path}, cmd.Argv[1:]...) {
				b.WriteString(" " + shellQuoteAll(a))
			}
			b.WriteByte('\n')
		}
	}
	return b.Bytes(), nil
}

// shellQuote quotes s for any POSIX shell when it needs it: in single
// quotes, where nothing is special but the single quote itself (closed,
// escaped, reopened). A value of plain characters (a stage path, the
// shim's objects) stays bare, because a Slurm TaskProlog's
// "export NAME=VALUE" lines are taken verbatim, quotes included.
func shellQuote(s string) string {
	if strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-:,=+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// shellQuoteAll is shellQuote that also quotes the empty string, for a
// command's arguments (an empty argument must stay one).
func shellQuoteAll(s string) string {
	if s == "" {
		return "''"
	}
	return shellQuote(s)
}

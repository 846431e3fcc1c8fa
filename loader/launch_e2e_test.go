package loader

// `dlbundle env`: a process that a launcher not under the shim starts with
// env's variables is served as under exec. The launcher here is a shell
// (eval "$(dlbundle env IMAGE)"; exec "$@") under strace -f: the shell
// itself is not preloaded (it read the variables after it started), so its
// execve of the app is the launcher's own, as slurmstepd's or a Flux
// shell's would be; everything after it is the app's.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/internal/clitest"
)

func TestEnvZeroOperationsOnBundledPaths(t *testing.T) {
	for _, tool := range []string{"strace", "gcc", "/usr/bin/python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed (make deps installs it): %v", tool, err)
		}
	}
	bin := clitest.CLI(t)
	apps := []e2eApp{
		cRunpathDlopen,
		{"python-numpy", func(t *testing.T, dir string) []string {
			return []string{"/usr/bin/python3", "-c", "import numpy, sys; print(numpy.arange(10).sum(), sys.executable, sys.argv[0])"}
		}, false},
	}
	for _, app := range apps {
		t.Run(app.name, func(t *testing.T) {
			dir := t.TempDir()
			cmd := app.setup(t, dir)
			env := clitest.CleanEnv(dir)
			img := app.pilot(t, dir, env, bin, cmd)
			stage := filepath.Join(dir, "stage")
			bundled, _ := bundledPaths(t, img)
			if !bundled[cmd[0]] {
				t.Fatalf("%s is not bundled in the image; the test needs it to be", cmd[0])
			}

			native := runIn(t, dir, env, cmd[0], cmd[1:]...)
			underExec := runIn(t, dir, env, bin, append([]string{"exec", "--stage-dir", stage, img, "--"}, cmd...)...)
			if underExec != native {
				t.Fatalf("exec's output differs from native:\nnative: %q\nexec:   %q", native, underExec)
			}
			// The shell as the launcher: the stage is warm (exec made it).
			script := `eval "$("$0" env --stage-dir "$1" "$2")" || exit 9; shift 2; exec "$@"`
			log := filepath.Join(dir, "env.strace")
			out := runIn(t, dir, env, "strace", append([]string{"-f", "-qq", "-y", "-s", "4096",
				"-e", "trace=%file,getdents64", "-o", log, "sh", "-c", script, bin, stage, img}, cmd...)...)
			if out != native {
				t.Fatalf("under env's variables the output differs from native:\nnative: %q\nenv:    %q", native, out)
			}
			ops := straceOps(t, log, dir)
			// The launcher's execve of the program it was given is the
			// launcher's (the kernel reads the program from its path); the
			// app's calls come after it.
			var launcher, rest []string
			for _, l := range ops[cmd[0]] {
				if strings.Contains(l, "execve(") && strings.Contains(l, `"`+cmd[0]+`"`) && len(launcher) == 0 {
					launcher = append(launcher, l)
					continue
				}
				rest = append(rest, l)
			}
			if len(launcher) != 1 {
				t.Fatalf("the shell's execve of %s is not in the trace:\n%s", cmd[0], strings.Join(ops[cmd[0]], "\n"))
			}
			ops[cmd[0]] = rest
			if len(rest) == 0 {
				delete(ops, cmd[0])
			}
			n, report := leaks(ops, bundled)
			t.Logf("%d bundled paths; operations on them under env's variables: %d (besides the launcher's execve of %s)", len(bundled), n, cmd[0])
			if n != 0 {
				t.Errorf("under env's variables %d system calls reached %d bundled original paths:\n%s%s",
					n, len(report), strings.Join(report[:min(len(report), 40)], "\n"), glibcInternalHint(report))
			}
			nNative, _ := leaks(func() map[string][]string {
				nlog := filepath.Join(dir, "native.strace")
				runIn(t, dir, env, "strace", append([]string{"-f", "-qq", "-y", "-e", "trace=%file,getdents64", "-o", nlog}, cmd...)...)
				return straceOps(t, nlog, dir)
			}(), bundled)
			if nNative <= 1 {
				t.Fatalf("natively the app made %d operations on its bundled paths: the check cannot fail", nNative)
			}
		})
	}
}

// The three formats say the same, and the sh one, evaluated, gives what
// exec sets (ShimEnv), the app's LD_LIBRARY_PATH included.
func TestEnvFormatsAgree(t *testing.T) {
	p := clitest.NewProbeImage(t)
	stage := filepath.Join(p.Work, "stage")
	// One launch (a job step) for the three calls: the run id that names
	// the node's record is the launch's, as for every rank of a step.
	env := append(clitest.CleanEnv(p.Work), "LD_LIBRARY_PATH="+filepath.Dir(p.Original)+":/usr/lib/nonexistent",
		"SLURM_JOB_ID=5", "SLURM_STEP_ID=0")
	sh, stderr, _, state := clitest.RunCLI(t, env, "env", "--stage-dir", stage, p.Image)
	if !state.Success() {
		t.Fatalf("dlbundle env: %v\n%s", state, stderr)
	}
	js, _, _, _ := clitest.RunCLI(t, env, "env", "--format=json", "--stage-dir", stage, p.Image)
	env0, _, _, _ := clitest.RunCLI(t, env, "env", "--format", "env0", "--stage-dir", stage, p.Image)

	// sh: evaluated by a real shell, which prints the result.
	evaluated := runIn(t, p.Work, env, "sh", "-c", sh+"\nenv", "sh")
	before := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		before[k] = v
	}
	fromSh, after := map[string]string{}, map[string]string{} // what eval changed; all of it
	for _, kv := range strings.Split(evaluated, "\n") {
		if k, v, ok := strings.Cut(kv, "="); ok && (strings.HasPrefix(k, "LD_") || strings.HasPrefix(k, "DLBUNDLE_")) {
			after[k] = v
			if old, was := before[k]; !was || old != v {
				fromSh[k] = v
			}
		}
	}
	var fromJSON struct {
		Set   map[string]string
		Unset []string
	}
	if err := json.Unmarshal([]byte(js), &fromJSON); err != nil {
		t.Fatalf("--format=json: %v\n%s", err, js)
	}
	from0 := map[string]string{}
	for _, kv := range strings.Split(strings.TrimSuffix(env0, "\x00"), "\x00") {
		k, v, _ := strings.Cut(kv, "=")
		from0[k] = v
	}
	if a, b, c := fmt.Sprint(sorted(fromSh)), fmt.Sprint(sorted(fromJSON.Set)), fmt.Sprint(sorted(from0)); a != b || b != c {
		t.Errorf("the formats disagree:\nsh:   %s\njson: %s\nenv0: %s", a, b, c)
	}
	stageDir := fromJSON.Set[EnvStage]
	if !strings.HasPrefix(stageDir, stage+"/sha256-") {
		t.Fatalf("DLBUNDLE_STAGE=%q, want a stage in %s", stageDir, stage)
	}
	want := ShimEnv(stageDir, env, EnvOptions{})
	for _, kv := range want {
		k, v, _ := strings.Cut(kv, "=")
		if (strings.HasPrefix(k, "LD_") || strings.HasPrefix(k, "DLBUNDLE_")) && after[k] != v {
			t.Errorf("after eval %s=%q, want %q as exec sets it", k, after[k], v)
		}
	}
	// With no --report, the processes record what they pass to the file
	// system in the node's records, as under exec.
	if r := fromJSON.Set["DLBUNDLE_REPORT"]; !strings.HasPrefix(r, stage+"/records/") || fromJSON.Set["DLBUNDLE_RUN"] == "" {
		t.Errorf("DLBUNDLE_REPORT=%q DLBUNDLE_RUN=%q; want a record in %s/records named by the run", r, fromJSON.Set["DLBUNDLE_RUN"], stage)
	}
	if len(fromSh) < 4 {
		t.Errorf("eval changed only %v; want the shim's variables", fromSh)
	}
}

// A missing image: one line that names it, nothing on stdout (a launcher
// that evaluates it sets nothing), exit 2 (a missing input, as for every
// verb); with --fallback, a warning and
// still nothing on stdout, exit 0 (the app runs natively).
func TestEnvFailureAndFallback(t *testing.T) {
	p := clitest.NewProbeImage(t)
	stage := filepath.Join(p.Work, "stage")
	missing := filepath.Join(p.Work, "no-such.dlimg")
	out, stderr, _, state := clitest.RunCLI(t, clitest.CleanEnv(p.Work), "env", "--stage-dir", stage, missing)
	if state.ExitCode() != 2 || out != "" || !strings.Contains(stderr, missing) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
		t.Errorf("missing image: exit %d, stdout %q, stderr %q; want 2, nothing, one line naming the image", state.ExitCode(), out, stderr)
	}
	out, stderr, _, state = clitest.RunCLI(t, clitest.CleanEnv(p.Work), "env", "--fallback", "--stage-dir", stage, missing)
	if state.ExitCode() != 0 || out != "" || !strings.Contains(stderr, "natively") {
		t.Errorf("--fallback: exit %d, stdout %q, stderr %q; want 0, nothing, a warning", state.ExitCode(), out, stderr)
	}
}

func sorted(m map[string]string) []string {
	var s []string
	for k, v := range m {
		s = append(s, k+"="+v)
	}
	sort.Strings(s)
	return s
}

// A launcher that knows only a path (slurmstepd execs argv[0]; the Slurm
// plugin points it at the staged copy) starts the program with argv[0] =
// $DLBUNDLE_STAGE/root<original>: the app sees its original path in
// argv[0] and /proc/self/exe, as under exec. A process started by its
// staged path without the shim's variables sees the staged path (the
// check can fail).
func TestStagedProgramByPathSeesOriginalArgv0(t *testing.T) {
	p := clitest.NewProbeImage(t)
	env, stageDir := launcherlessEnv(t, p.Work, "--stage-dir", filepath.Join(p.Work, "stage"), p.Image)
	staged := filepath.Join(stageDir, "root") + p.Original
	out := runIn(t, p.Work, env, staged, "arg1")
	if got := clitest.Field(out, "argv0"); got != p.Original {
		t.Errorf("argv[0] = %q, want the original %q", got, p.Original)
	}
	if got := clitest.Field(out, "exe"); got != p.Original {
		t.Errorf("/proc/self/exe = %q, want the original %q", got, p.Original)
	}
	if !strings.Contains(out, "arg=arg1") {
		t.Errorf("arguments not passed: %q", out)
	}
	native := runIn(t, p.Work, clitest.CleanEnv(p.Work), staged)
	if got := clitest.Field(native, "argv0"); got != staged {
		t.Fatalf("without the shim argv[0] = %q, want the staged path %q: the check cannot fail", got, staged)
	}
}

// launcherlessEnv is the environment a launcher gives a rank from
// `dlbundle env --format=env0 ARGS...` (run in work, as the test's clean
// environment has it): that environment plus env's variables, and the
// stage they name.
func launcherlessEnv(t *testing.T, work string, args ...string) (env []string, stageDir string) {
	t.Helper()
	env0, stderr, _, state := clitest.RunCLI(t, clitest.CleanEnv(work), append([]string{"env", "--format=env0"}, args...)...)
	if !state.Success() {
		t.Fatalf("dlbundle env: %v\n%s", state, stderr)
	}
	env = clitest.CleanEnv(work)
	for _, kv := range strings.Split(strings.TrimSuffix(env0, "\x00"), "\x00") {
		env = append(env, kv)
		if k, v, _ := strings.Cut(kv, "="); k == EnvStage {
			stageDir = v
		}
	}
	return env, stageDir
}

// With a command, env prints its staged copy after the variables ("set --"
// in sh, "command" in json): a shell that evaluates the output and executes
// "$@" starts the staged copy, so the kernel's execve never reads the
// original path. The probe's original path does not exist on this machine:
// only the staged copy can run.
func TestEnvPrintsStagedCommand(t *testing.T) {
	p := clitest.NewProbeImage(t)
	if _, err := os.Stat(p.Original); err == nil {
		t.Fatalf("%s exists on this machine: the check cannot fail", p.Original)
	}
	stage := filepath.Join(p.Work, "stage")
	env := clitest.CleanEnv(p.Work)
	sh, stderr, _, state := clitest.RunCLI(t, env, "env", "--stage-dir", stage, p.Image, "--", p.Original, "arg 1", "")
	if !state.Success() {
		t.Fatalf("dlbundle env -- CMD: %v\n%s", state, stderr)
	}
	last := sh[strings.LastIndex(strings.TrimSuffix(sh, "\n"), "\n")+1:]
	if !strings.HasPrefix(last, "set -- "+stage+"/") || !strings.Contains(last, "/root"+p.Original+" ") {
		t.Errorf("last line %q: want 'set -- <staged copy of %s> ARGS'", last, p.Original)
	}
	out := runIn(t, p.Work, env, "sh", "-c", sh+`exec "$@"`, "sh")
	if got := clitest.Field(out, "argv0"); got != p.Original {
		t.Errorf("argv[0] = %q, want the original %q (the shim's)", got, p.Original)
	}
	if !strings.Contains(out, "arg=arg 1\narg=\n") {
		t.Errorf("arguments not passed as given (\"arg 1\", \"\"): %q", out)
	}
	js, stderr, _, state := clitest.RunCLI(t, env, "env", "--format=json", "--stage-dir", stage, p.Image, "--", p.Original, "x")
	var j struct {
		Command []string
		Argv0   string
	}
	if !state.Success() || json.Unmarshal([]byte(js), &j) != nil || len(j.Command) != 2 ||
		!strings.HasSuffix(j.Command[0], "/root"+p.Original) || j.Command[1] != "x" || j.Argv0 != p.Original {
		t.Errorf("--format=json -- CMD: %v %s\n%s: want command [<staged copy> x], argv0 %s", state, stderr, js, p.Original)
	}
	if _, _, _, state := clitest.RunCLI(t, env, "env", "--format=env0", "--stage-dir", stage, p.Image, "--", p.Original); state.ExitCode() != 2 {
		t.Errorf("--format=env0 with a command: exit %d, want 2 (a usage error)", state.ExitCode())
	}
}

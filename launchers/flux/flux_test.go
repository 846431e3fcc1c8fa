// Package flux holds the Flux job shell plugin (dlbundle.lua) and its test
// against a real Flux test instance.
package flux

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/clitest"
)

// fluxBin is flux from PATH (a site's), else the build that make deps
// installs from ../shared/flux.
func fluxBin(t *testing.T) string {
	if p, err := exec.LookPath("flux"); err == nil {
		return p
	}
	if _, err := os.Stat("/opt/flux/bin/flux"); err == nil {
		return "/opt/flux/bin/flux"
	}
	t.Skip("no flux: neither on PATH nor /opt/flux/bin/flux (make deps installs it from ../shared/flux)")
	return ""
}

// taskStrace runs one task under strace, its log named after its rank.
const taskStrace = `#!/bin/sh
exec strace -f --seccomp-bpf -qq -y -e signal=none -e trace=%%file -o "%s/task.$FLUX_TASK_RANK" "$@"
`

func run(t *testing.T, dir string, env []string, name string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("%s: %v", name, err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// TestFluxRunDlbundle: flux run -o dlbundle=IMAGE -N3 -n6 under flux start
// --test-size=3 runs the C app with RUNPATH and dlopen (the demo's) from the
// stage: output as native, dlbundle env once per job shell, and task by
// task no call on a path the image decides (strace). A missing image ends
// the job with dlbundle's message; -o dlbundle-fallback runs it natively,
// with a warning (not an ERROR line).
func TestFluxRunDlbundle(t *testing.T) {
	flux := fluxBin(t)
	for _, tool := range []string{"strace", "gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed (make deps installs it)", tool)
		}
	}
	bin := clitest.CLI(t)
	plugin, err := filepath.Abs("dlbundle.lua")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gen, _ := filepath.Abs("../../examples/demo/make-fixture.sh")
	app := filepath.Join(dir, "app")
	env := append(clitest.CleanEnv(dir), "PATH="+filepath.Join(dir, "bin")+":"+filepath.Dir(flux)+":/usr/bin:/bin")
	if out, code := run(t, dir, env, gen, app, "20"); code != 0 {
		t.Fatalf("make-fixture.sh: %s", out)
	}
	argv := []string{filepath.Join(app, "bin/demo-app")}
	img := filepath.Join(dir, "app.dlimg")
	// dlbundle as the job finds it in PATH: a wrapper that counts its runs.
	runs := filepath.Join(dir, "env-runs")
	os.Mkdir(filepath.Join(dir, "bin"), 0o755)
	wrapper := fmt.Sprintf("#!/bin/sh\necho \"$FLUX_JOB_ID\" >> %s\nexec %s \"$@\"\n", runs, bin)
	if err := os.WriteFile(filepath.Join(dir, "bin", "dlbundle"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	straceDir := filepath.Join(dir, "strace")
	os.Mkdir(straceDir, 0o755)
	rank := filepath.Join(dir, "strace-task.sh")
	if err := os.WriteFile(rank, []byte(fmt.Sprintf(taskStrace, straceDir)), 0o755); err != nil {
		t.Fatal(err)
	}
	env = append(env, "DLBUNDLE_STAGE_DIR="+filepath.Join(dir, "stage"))
	fluxRun := fmt.Sprintf("flux run -o userrc=%s -N3 -n6", plugin)
	// The pilot runs under flux too: each task's trace is named after its
	// FLUX_TASK_RANK, and build merges them.
	script := strings.Join([]string{
		"flux run -N2 -n2 " + bin + " trace -q -o pilot.trace -- " + argv[0] + " > pilot.out 2>&1 || exit 3",
		bin + " build --include " + app + " -o " + img + " pilot.trace.0 pilot.trace.1 || exit 4",
		"flux run -N3 -n6 " + argv[0] + " > native.out",
		fluxRun + " -o dlbundle=" + img + " " + rank + " " + argv[0] + " > bundled.out",
		fluxRun + " -o dlbundle=" + filepath.Join(dir, "no-such.dlimg") + " " + argv[0] + " > missing.out 2>&1; echo $? > missing.rc",
		fluxRun + " -o dlbundle=" + filepath.Join(dir, "no-such.dlimg") + " -o dlbundle-fallback " + argv[0] + " > fallback.out 2>&1; echo $? > fallback.rc",
	}, "\n")
	if out, code := run(t, dir, env, flux, "start", "--test-size=3", "sh", "-c", script); code != 0 {
		b, _ := os.ReadFile(filepath.Join(dir, "pilot.out"))
		t.Fatalf("flux start --test-size=3: exit %d (3: the pilot under flux run, 4: build of its two traces)\n%s\npilot:\n%s", code, out, b)
	}
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return string(b)
	}
	native, bundled := sortedLines(read("native.out")), sortedLines(read("bundled.out"))
	if strings.Count(native, "checksum") != 6 {
		t.Fatalf("native run: want 6 tasks:\n%s", native)
	}
	if bundled != native {
		t.Errorf("output under -o dlbundle differs from native:\nnative:\n%s\ndlbundle:\n%s", native, bundled)
	}
	// One dlbundle env per job shell (a node of the instance) and job; the
	// missing image's two jobs add theirs.
	ids := strings.Fields(read("env-runs"))
	if len(ids) < 3 || ids[0] != ids[1] || ids[1] != ids[2] || (len(ids) > 3 && ids[3] == ids[0]) {
		t.Errorf("dlbundle env runs (job ids): %v; want 3 for the first job (one per job shell)", ids)
	}
	if !strings.HasPrefix(ids[0], "ƒ") {
		t.Errorf("FLUX_JOB_ID given to dlbundle env: %q, want the job's F58 id", ids[0])
	}
	if rc := strings.TrimSpace(read("missing.rc")); rc == "0" || !strings.Contains(read("missing.out"), "no-such.dlimg") ||
		strings.Contains(read("missing.out"), "checksum") {
		t.Errorf("missing image: exit %s, want a failed job with dlbundle's message and no task run:\n%s", rc, read("missing.out"))
	}
	if rc := strings.TrimSpace(read("fallback.rc")); rc != "0" || strings.Count(read("fallback.out"), "checksum") != 6 {
		t.Errorf("missing image with -o dlbundle-fallback: exit %s, want 6 native tasks:\n%s", rc, read("fallback.out"))
	}
	// The fallback is what the user asked for: a warning, not an error.
	if out := read("fallback.out"); !strings.Contains(out, "dlbundle: warning:") || strings.Contains(out, "ERROR") {
		t.Errorf("missing image with -o dlbundle-fallback: want dlbundle's warning, no ERROR line:\n%s", out)
	}

	decides := imageDecides(t, img)
	for r := 0; r < 6; r++ {
		b, err := os.ReadFile(filepath.Join(straceDir, fmt.Sprintf("task.%d", r)))
		if err != nil {
			t.Errorf("task %d: no strace log: %v", r, err)
			continue
		}
		calls, staged := imageCalls(string(b), dir, decides, false)
		if !staged {
			t.Errorf("task %d: no execve of a staged program; the check cannot work", r)
		}
		if len(calls) > 0 {
			t.Errorf("task %d: %d calls on paths the image decides, first: %s", r, len(calls), strings.Join(calls[:min(3, len(calls))], " | "))
		}
	}
	// The check must be able to fail: natively the app looks its libraries up.
	log := filepath.Join(dir, "native.strace")
	run(t, dir, env, "strace", append([]string{"-f", "-qq", "-y", "-e", "trace=%file", "-o", log}, argv...)...)
	b, _ := os.ReadFile(log)
	if n, _ := imageCalls(string(b), dir, decides, true); len(n) < 20 {
		t.Fatalf("natively the app made %d calls on paths the image decides; the check cannot fail", len(n))
	}
}

func sortedLines(s string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	sort.Strings(l)
	return strings.Join(l, "\n")
}

// imageDecides says whether the image decides an absolute, clean path: an
// entry other than external, a name absent from a bundled directory's
// listing, or a path below a bundled file.
func imageDecides(t *testing.T, img string) func(string) bool {
	t.Helper()
	im, err := image.OpenFile(img)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	types := map[string]image.Type{}
	listed := map[string]bool{}
	for _, e := range im.Entries() {
		types[e.Path] = e.Type
		for _, d := range e.Listing {
			listed[path.Join(e.Path, d.Name)] = true
		}
	}
	return func(p string) bool {
		if ty, ok := types[p]; ok {
			return ty != image.TypeExternal
		}
		for q := p; q != "/"; q = path.Dir(q) {
			switch types[path.Dir(q)] {
			case image.TypeDir:
				return q == p && !listed[q]
			case image.TypeRegular:
				return true
			case image.TypeExternal, image.TypeMissing, image.TypeSymlink:
				return false
			}
		}
		return false
	}
}

var straceCall = regexp.MustCompile(`^\d+ +(\w+)\((?:(AT_FDCWD|-?\d+)(?:<([^>]*)>)?, )?"((?:[^"\\]|\\.)*)"`)

// imageCalls returns the calls of an strace log, from the app's start (an
// execve of a staged program; with native, from the first line) on, whose
// path the image decides.
func imageCalls(log, cwd string, decides func(string) bool, native bool) (calls []string, staged bool) {
	staged = native
	for _, l := range strings.Split(log, "\n") {
		m := straceCall.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		p := m[4]
		if m[1] == "execve" && strings.Contains(p, "/sha256-") && !strings.Contains(l, "= -1") {
			staged = true
		}
		if !staged || p == "" || p == "/" || strings.Contains(p, `\`) {
			continue
		}
		if !strings.HasPrefix(p, "/") {
			if m[2] != "" && m[2] != "AT_FDCWD" && strings.HasPrefix(m[3], "/") {
				p = filepath.Join(m[3], p)
			} else {
				p = filepath.Join(cwd, p)
			}
		}
		if decides(path.Clean(p)) {
			calls = append(calls, l)
		}
	}
	return calls, staged
}

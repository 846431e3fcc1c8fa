package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/internal/clitest"
)

// TestJSONForScripts: verify, stage and ls print one JSON object on stdout
// with --json (nothing else there), with the exit status of the text form.
func TestJSONForScripts(t *testing.T) {
	bin := buildCLI(t)
	img, root := imageOfTree(t)
	decode := func(args []string, wantCode int, v any) {
		t.Helper()
		stdout, stderr, code := runContract(t, bin, args)
		dec := json.NewDecoder(strings.NewReader(stdout))
		if code != wantCode {
			t.Fatalf("dlbundle %q: exit %d, want %d: %s", args, code, wantCode, stderr)
		}
		if err := dec.Decode(v); err != nil {
			t.Fatalf("dlbundle %q: stdout is not JSON: %v\n%s", args, err, stdout)
		}
		if dec.More() {
			t.Fatalf("dlbundle %q: more than one JSON object on stdout:\n%s", args, stdout)
		}
	}

	var v struct {
		Result  string `json:"result"`
		Entries int    `json:"entries"`
		Digest  string `json:"toc_digest"`
		Against bool   `json:"against_source"`
		Stale   []struct{ Path, Group, Reason string }
	}
	decode([]string{"verify", "--json", "--against-source", img}, 0, &v)
	if v.Result != "intact" || v.Entries < 5 || !strings.HasPrefix(v.Digest, "sha256:") || !v.Against || len(v.Stale) != 0 {
		t.Errorf("verify --json of a fresh image: %+v", v)
	}
	// A library rewritten and a name added beside it: content first, then
	// the listing, as the text lists them.
	if err := os.WriteFile(root+"/lib/libz.so.1.2.13", []byte("not the library any more"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(root+"/lib/new.py", nil, 0o644)
	v.Stale = nil
	decode([]string{"verify", "--json", "--against-source", img}, verifyStale, &v)
	if v.Result != "stale" || len(v.Stale) != 2 ||
		v.Stale[0].Path != root+"/lib/libz.so.1.2.13" || v.Stale[0].Group != "content" ||
		v.Stale[1].Path != root+"/lib" || v.Stale[1].Group != "listing" || !strings.Contains(v.Stale[1].Reason, "new.py") {
		t.Errorf("verify --json of a stale image: %+v", v)
	}

	// A corrupt image: nothing on stdout, one line on stderr, exit 1.
	junk := filepath.Join(t.TempDir(), "junk.dlimg")
	os.WriteFile(junk, []byte("not an image\n"), 0o644)
	if stdout, stderr, code := runContract(t, bin, []string{"verify", "--json", junk}); code != verifyCorrupt || stdout != "" ||
		strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "dlbundle verify: ") {
		t.Errorf("verify --json of a corrupt image: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}

	stages := filepath.Join(t.TempDir(), "stages")
	var s struct {
		Image, Stage, Digest string
		Made                 bool
	}
	decode([]string{"stage", "--json", "--stage-dir", stages, img}, 0, &s)
	if !s.Made || s.Image != img || !strings.HasPrefix(s.Digest, "sha256:") ||
		s.Stage != filepath.Join(stages, strings.Replace(s.Digest, ":", "-", 1)) {
		t.Errorf("first stage --json: %+v", s)
	}
	if fi, err := os.Stat(s.Stage); err != nil || !fi.IsDir() {
		t.Errorf("stage --json names %s, which is no directory: %v", s.Stage, err)
	}
	first := s
	decode([]string{"stage", "--json", "--stage-dir", stages, img}, 0, &s)
	if s.Made || s.Stage != first.Stage || s.Digest != first.Digest {
		t.Errorf("second stage --json: %+v, want the first's stage found (%+v)", s, first)
	}

	// env --json is --format=json: the variables that serve a process
	// from the stage just made.
	var e struct {
		Set   map[string]string
		Unset []string
	}
	decode([]string{"env", "--json", "--stage-dir", stages, img}, 0, &e)
	if e.Set["DLBUNDLE_STAGE"] != first.Stage || e.Unset == nil {
		t.Errorf("env --json: %+v, want DLBUNDLE_STAGE=%s", e, first.Stage)
	}
	if stdout, stderr, code := runContract(t, bin, []string{"env", "--json", "--format=env0", "--stage-dir", stages, img}); code != exitUsage || stdout != "" || !strings.Contains(stderr, "--json and --format=env0") {
		t.Errorf("env --json --format=env0: exit %d, stdout %q, stderr %q; want a usage error", code, stdout, stderr)
	}

	var l struct {
		Stages []struct{ Name string }
	}
	decode([]string{"ls", "--json", "--stage-dir", filepath.Join(t.TempDir(), "none")}, 0, &l)
	if l.Stages == nil || len(l.Stages) != 0 {
		t.Errorf("ls --json of no stage dir: %+v", l)
	}
	decode([]string{"ls", "--json", "--stage-dir", stages}, 0, &l)
	if len(l.Stages) != 1 || l.Stages[0].Name != filepath.Base(first.Stage) {
		t.Errorf("ls --json after a stage: %+v", l)
	}
}

// TestReportJSON: report --json is one object with the run's figures, every
// list present ([] when empty), and the files it was made of.
func TestReportJSON(t *testing.T) {
	bin := buildCLI(t)
	probe := clitest.NewProbeImage(t)
	dir := t.TempDir()
	rep := filepath.Join(dir, "run.report")
	if _, stderr, code := runContract(t, bin, []string{"exec", "--stage-dir", filepath.Join(dir, "stages"),
		"--report", rep, probe.Image, "--", probe.Original}); code != 0 {
		t.Fatalf("exec: exit %d: %s", code, stderr)
	}
	stdout, stderr, code := runContract(t, bin, []string{"report", "--json", "--image", probe.Image, rep})
	var r map[string]json.RawMessage
	dec := json.NewDecoder(strings.NewReader(stdout))
	if err := dec.Decode(&r); code != 0 || err != nil || dec.More() {
		t.Fatalf("report --json: exit %d, %v: %s\n%s", code, err, stderr, stdout)
	}
	// The probe is one process, and ld.so loads its libc from the node
	// (the image bundles the program alone).
	var procs int
	var outside []struct{ Path string }
	json.Unmarshal(r["processes"], &procs)
	json.Unmarshal(r["outside"], &outside)
	if procs != 1 || len(outside) != 1 || !strings.Contains(outside[0].Path, "libc.so") {
		t.Fatalf("report --json: processes %d, outside %v; want 1 process that loaded libc from outside the image\n%s", procs, outside, stdout)
	}
	for _, list := range []string{"lacked", "node_local", "temporary", "per_run", "left_out", "outside", "fallbacks", "runs", "include_prefixes"} {
		if v, ok := r[list]; !ok || !strings.HasPrefix(string(v), "[") {
			t.Errorf("report --json: %s is %s, want a list", list, v)
		}
	}
	var img string
	var reports []string
	json.Unmarshal(r["image"], &img)
	json.Unmarshal(r["reports"], &reports)
	if img != probe.Image || len(reports) != 1 || reports[0] != rep {
		t.Errorf("report --json names image %q and reports %q, want %s and [%s]", img, reports, probe.Image, rep)
	}
	// fold is the build --from command the text advises: a script runs it
	// as given, and the image then holds the libc the run loaded from outside.
	var fold string
	json.Unmarshal(r["fold"], &fold)
	words := strings.Fields(fold)
	if len(words) < 2 || words[0] != "dlbundle" || words[1] != "build" || !strings.Contains(fold, "--from "+probe.Image) {
		t.Fatalf("report --json fold = %q, want the build --from command for %s", fold, probe.Image)
	}
	if _, stderr, code := runContract(t, bin, words[1:]); code != 0 {
		t.Fatalf("%s: exit %d: %s", fold, code, stderr)
	}
	if stdout, _, code := runContract(t, bin, []string{"inspect", "--list", probe.Image}); code != 0 || !strings.Contains(stdout, outside[0].Path) {
		t.Errorf("after %s the image does not list %s:\n%s", fold, outside[0].Path, stdout)
	}
}

// TestTraceRankFilesByName: under a launcher 'trace -o NAME' writes NAME.0,
// NAME.1..., rank 0 says so, and build and inspect --trace take NAME for
// them all.
func TestTraceRankFilesByName(t *testing.T) {
	bin := buildCLI(t)
	dir := t.TempDir()
	name := filepath.Join(dir, "capp.trace")
	run := func(env []string, args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		cmd.Env = append(clitest.CleanEnv(t.TempDir()), env...)
		out, err := cmd.CombinedOutput()
		if _, ok := err.(*exec.ExitError); err != nil && !ok {
			t.Fatal(err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}
	// Ranks 2 and 10 too: rank order is numeric, not by name.
	for _, rank := range []string{"0", "1", "2", "10"} {
		out, code := run([]string{"OMPI_COMM_WORLD_RANK=" + rank, "OMPI_COMM_WORLD_SIZE=11"}, "trace", "-o", name, "--", "/bin/true")
		if code != 0 || !strings.Contains(out, "wrote "+name+"."+rank+" ") {
			t.Fatalf("rank %s: trace -o: exit %d, does not name %s.%s:\n%s", rank, code, name, rank, out)
		}
		if note := "build from them all with: dlbundle build -o app.dlimg " + name; strings.Contains(out, note) != (rank == "0") {
			t.Errorf("rank %s: the note on rank files should appear on rank 0 only:\n%s", rank, out)
		}
	}
	if _, err := os.Stat(name); err == nil {
		t.Fatalf("%s itself was written: the ranks' files are its .RANK files", name)
	}
	if got, want := withRankFiles([]string{name}), []string{name + ".0", name + ".1", name + ".2", name + ".10"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("withRankFiles(%s) = %v, want %v", name, got, want)
	}
	img := filepath.Join(dir, "capp.dlimg")
	out, code := run(nil, "build", "-o", img, name)
	if code != 0 || !strings.Contains(out, "from 4 trace(s)") {
		t.Fatalf("build NAME of 4 rank files: exit %d:\n%s", code, out)
	}
	out, code = run(nil, "inspect", "--html", filepath.Join(dir, "p.html"), "--trace", name, img)
	if code != 0 {
		t.Errorf("inspect --html --trace NAME: exit %d:\n%s", code, out)
	}
	out, code = run(nil, "inspect", "--html", filepath.Join(dir, "p.html"), "--trace", name+"x", img)
	if code != 2 || !strings.Contains(out, "no trace "+name+"x") || strings.Count(out, "\n") != 1 {
		t.Errorf("inspect --trace of no trace: exit %d, want 2 and one line:\n%s", code, out)
	}
}

// TestStaticProgramNothingToGain: the build of a static program's pilot says
// that it is static and dlbundle has nothing to gain for it, not "nothing to
// bundle ... --include"; one that also read an input file in /tmp is told
// both. The same program linked dynamically builds (its libc is bundled).
func TestStaticProgramNothingToGain(t *testing.T) {
	bin := buildCLI(t)
	dir := t.TempDir() // under /tmp: build leaves it out, as it did for the user
	src := filepath.Join(dir, "s.c")
	os.WriteFile(src, []byte(`#include <stdio.h>
int main(int argc, char **argv) {
	if (argc > 1) { FILE *f = fopen(argv[1], "r"); if (f) fclose(f); }
	return 0;
}
`), 0o644)
	static, dynamic := filepath.Join(dir, "static"), filepath.Join(dir, "dynamic")
	for _, c := range [][]string{{"-static", "-o", static, src}, {"-o", dynamic, src}} {
		if out, err := exec.Command("cc", c...).CombinedOutput(); err != nil {
			t.Fatalf("cc %v: %v\n%s (a static link needs libc6-dev's libc.a)", c, err, out)
		}
	}
	if !isStaticELF(static) || isStaticELF(dynamic) || isStaticELF("/usr/bin/python3") {
		t.Fatalf("isStaticELF: %s %v, %s %v, python3 %v", static, isStaticELF(static), dynamic, isStaticELF(dynamic), isStaticELF("/usr/bin/python3"))
	}
	input := filepath.Join(dir, "input.nml")
	os.WriteFile(input, []byte("&x /\n"), 0o644)
	build := func(name string, want int, app ...string) string {
		t.Helper()
		tr := filepath.Join(dir, name+".trace")
		if out, code := runCLI(t, bin, append([]string{"trace", "-q", "-o", tr, "--"}, app...)...); code != 0 {
			t.Fatalf("trace %v: exit %d\n%s", app, code, out)
		}
		stdout, stderr, code := runContract(t, bin, []string{"build", "-o", filepath.Join(dir, name+".dlimg"), tr})
		if code != want || (want == 1 && (stdout != "" || strings.Count(stderr, "\n") != 1)) {
			t.Fatalf("build of %v: exit %d, want %d (and one line on failure)\nstdout %q\nstderr %q", app, code, want, stdout, stderr)
		}
		return stdout + stderr
	}
	msg := build("alone", 1, static)
	if !strings.Contains(msg, "nothing to gain: "+static+" is statically linked") || strings.Contains(msg, "--include") {
		t.Errorf("build of a static program: %s", msg)
	}
	msg = build("input", 1, static, input)
	if !strings.Contains(msg, static+" is statically linked") || !strings.Contains(msg, "also read 1 other files") ||
		!strings.Contains(msg, "--include /tmp/") {
		t.Errorf("build of a static program that read an input in %s: %s", dir, msg)
	}
	msg = build("dynamic", 0, dynamic)
	if strings.Contains(msg, "statically") || !strings.Contains(msg, "elf-shared") {
		t.Errorf("build of a dynamic program in %s: %s", dir, msg)
	}
}

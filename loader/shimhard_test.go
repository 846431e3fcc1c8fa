package loader

// The shim's C at its edges: hostile paths in the report, more
// supplementary groups than a fixed array holds, over-long names, a huge
// environment entry, async-signal safety of _exit. Each test compares with
// what the kernel and libc do natively where there is a native answer.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/clitest"
	"github.com/dlbundle/dlbundle/internal/treeimage"
	"github.com/dlbundle/dlbundle/loader/stagefmt"
	"github.com/dlbundle/dlbundle/report"
)

// hardTree builds a tree with the hard probe (testdata/hard.c) and stages it
// without the tree's ancestors (like conformance: the temp dirs above the
// tree are outside the image, so lookups there pass through). The temp dirs
// are made world-traversable for the tests that run as another user.
type hardFixture struct {
	root, tree, stage, probe, staged string
	san                              *sanitizer // nil: the committed shim objects
}

func newHardFixture(t *testing.T, san *sanitizer) *hardFixture {
	t.Helper()
	root := t.TempDir()
	for d := root; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	T := filepath.Join(root, "tree")
	for _, d := range []string{"bin", "d", "outside"} {
		if err := os.MkdirAll(filepath.Join(T, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	probe := filepath.Join(T, "bin", "hard")
	if out, err := exec.Command("gcc", "-O1", "-o", probe, "testdata/hard.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc hard.c: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(T, "f"), []byte("f\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var entries []image.Entry
	for _, e := range treeimage.Entries(t, T) {
		if strings.HasPrefix(e.Path, T) {
			entries = append(entries, e)
		}
	}
	stage := stageEntries(t, root, entries)
	if err := os.Chmod(stage, 0o755); err != nil {
		t.Fatal(err)
	}
	staged, ok := StagedPath(stage, probe)
	if !ok {
		t.Fatalf("StagedPath(%s) = not bundled", probe)
	}
	if san != nil {
		san.install(t, stage)
	}
	return &hardFixture{root: root, tree: T, stage: stage, probe: probe, staged: staged, san: san}
}

func (f *hardFixture) run(t *testing.T, env []string, cred *syscall.Credential, args ...string) (stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(f.probe, args...)
	if strings.Contains(strings.Join(env, "\n"), EnvStage+"=") {
		cmd.Path = f.staged // as dlbundle exec runs a bundled executable
	}
	cmd.Env, cmd.Dir = env, "/"
	if f.san != nil {
		cmd.Env = f.san.env(env)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("hard %v: %v\n%s%s", args, err, o.String(), e.String())
	}
	return o.String(), e.String()
}

// TestReportHostilePaths: ~300 distinct passed-through paths full of
// characters JSON must escape (and some longer than 255 bytes) once overran
// the report's line buffer (ASan: global-buffer-overflow) and wrote an
// invalid line with a garbage "dropped". The line must be valid JSON, list
// each path exactly (or count it in dropped), and drop only what it lacks.
func TestReportHostilePaths(t *testing.T) { testReportHostilePaths(t, nil) }

func testReportHostilePaths(t *testing.T, san *sanitizer) {
	f := newHardFixture(t, san)
	reportFile := filepath.Join(f.root, "report.jsonl")
	env := ShimEnv(f.stage, probeEnv(f.root), EnvOptions{Report: reportFile})
	const n = 600
	dir := filepath.Join(f.root, "outside-the-image")
	f.run(t, env, nil, "pass", dir, fmt.Sprint(n))
	b, err := os.ReadFile(reportFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 1 {
		t.Fatalf("report has %d lines, want 1:\n%.2000s", len(lines), b)
	}
	if !json.Valid([]byte(lines[0])) {
		t.Fatalf("report line is not valid JSON:\n%.3000s", lines[0])
	}
	var r report.ProcessReport
	if err := json.Unmarshal([]byte(lines[0]), &r); err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, p := range r.PassedPaths {
		if listed[p] {
			t.Errorf("path listed twice: %q", p)
		}
		listed[p] = true
	}
	mine := 0
	for p := range listed {
		if strings.HasPrefix(p, dir+"/") {
			mine++
			if !strings.HasSuffix(p, "-") && !strings.ContainsAny(p, "\"\\") {
				t.Errorf("listed path %q is not one the probe used", p)
			}
		}
	}
	// The probe's paths are distinct: those not listed must be counted.
	if mine+r.Dropped < n {
		t.Errorf("%d of the probe's %d paths listed, %d dropped: %d unaccounted for", mine, n, r.Dropped, n-mine-r.Dropped)
	}
	if r.Dropped > n-mine+16 {
		t.Errorf("dropped = %d, but only %d of the probe's paths are not listed", r.Dropped, n-mine)
	}
	if int64(len(r.PassedPaths)) > r.Passed {
		t.Errorf("%d paths listed but %d passed", len(r.PassedPaths), r.Passed)
	}
	// Byte-exact: the first path (i = 0, 1000 bytes) round-trips, with its
	// control characters and its non-UTF-8 byte (JSON has no raw bytes: it
	// becomes U+FFFD, as Go's own encoder writes it).
	want := []byte(dir + "/q\"b\\s\x01\x1f\t\xff\xc3\xa9-0-")
	for o := len(want); o < 1000; {
		want = append(want, "\"\\\n\x7f"[o%4])
		o++
		if o%100 == 0 {
			want = append(want, '/')
			o++
		}
	}
	wantStr := strings.ToValidUTF8(string(want), "\uFFFD")
	if !listed[wantStr] { // (the first of the probe's paths: kept whatever else is dropped)
		t.Errorf("path 0 not listed exactly; want %q", wantStr)
	}
}

// TestAccessManyGroups: access() of a bundled file readable through its
// group only, by a user whose 300th supplementary group is that group
// (getgroups into a fixed array of 256 missed it: EACCES where the kernel
// says yes). Runs as nobody with 300 groups (the test runs as root).
func TestAccessManyGroups(t *testing.T) { testAccessManyGroups(t, nil) }

func testAccessManyGroups(t *testing.T, san *sanitizer) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a process with 300 supplementary groups")
	}
	f := newHardFixture(t, san)
	const gid = 51299
	file := filepath.Join(f.tree, "d", "grp")
	if err := os.WriteFile(file, []byte("g\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(file, 0, gid); err != nil {
		t.Fatal(err)
	}
	// A stage of its own: the file must be in the image.
	var entries []image.Entry
	for _, e := range treeimage.Entries(t, f.tree) {
		if strings.HasPrefix(e.Path, f.tree) {
			entries = append(entries, e)
		}
	}
	dir := filepath.Join(f.root, "s2")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	stage := stageEntries(t, dir, entries)
	if san != nil {
		san.install(t, stage)
	}
	// A stage belongs to the user who runs the app (nobody, here).
	err := filepath.WalkDir(stage, func(p string, d os.DirEntry, err error) error {
		if err == nil {
			err = os.Lchown(p, 65534, 65534)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	f.stage = stage
	f.staged, _ = StagedPath(stage, f.probe)
	var groups, many []uint32
	for g := uint32(gid - 299); g <= gid; g++ {
		groups = append(groups, g)
	}
	for g := uint32(gid - 1099); g <= gid; g++ { // more than the shim reads onto its stack
		many = append(many, g)
	}
	for _, c := range []struct {
		name string
		cred *syscall.Credential
	}{
		{"300 groups", &syscall.Credential{Uid: 65534, Gid: 65534, Groups: groups}},
		{"not in the group", &syscall.Credential{Uid: 65534, Gid: 65534, Groups: groups[:299]}},
		{"3 groups", &syscall.Credential{Uid: 65534, Gid: 65534, Groups: groups[297:]}},
		{"1100 groups", &syscall.Credential{Uid: 65534, Gid: 65534, Groups: many}},
		{"1099 groups, not in the group", &syscall.Credential{Uid: 65534, Gid: 65534, Groups: many[:1099]}},
	} {
		native, _ := f.run(t, probeEnv(f.root), c.cred, "access", file)
		report := filepath.Join(f.root, "report-"+strings.ReplaceAll(c.name, " ", "-"))
		shim, _ := f.run(t, ShimEnv(f.stage, probeEnv(f.root), EnvOptions{Report: report}), c.cred, "access", file)
		if native != shim {
			t.Errorf("%s: native:\n%sshim:\n%s", c.name, native, shim)
		}
	}
}

// TestNameTooLong: a component longer than NAME_MAX (255) in a bundled
// directory is ENAMETOOLONG, as the kernel says, not ENOENT; elsewhere the
// kernel's order of checks holds (ENOTDIR below a file, ENOENT below a
// missing directory).
func TestNameTooLong(t *testing.T) { testNameTooLong(t, nil) }

func testNameTooLong(t *testing.T, san *sanitizer) {
	f := newHardFixture(t, san)
	long := strings.Repeat("n", 256)
	env := ShimEnv(f.stage, probeEnv(f.root), EnvOptions{})
	for _, p := range []string{
		filepath.Join(f.tree, "d", long),
		filepath.Join(f.tree, "d", long, "x"),
		filepath.Join(f.tree, long),
		filepath.Join(f.tree, "f", long),
		filepath.Join(f.tree, "nope", long),
		filepath.Join(f.tree, "d", strings.Repeat("m", 255)),
		filepath.Join(f.tree, "d", "..", long),
		"/proc/self/fd/999", // (readlink of /proc links goes through the shim: errno as native)
	} {
		native, _ := f.run(t, probeEnv(f.root), nil, "name", p)
		shim, _ := f.run(t, env, nil, "name", p)
		if native != shim {
			t.Errorf("%.60s...: native:\n%sshim:\n%s", p, native, shim)
		}
	}
}

// TestAuditHugeEnvironmentEntry: the audit module reads /proc/self/environ
// in 64 KiB pieces; an entry longer than that must be skipped whole, not
// parsed from its middle (where "DLBUNDLE_STAGE=/elsewhere" could sit).
func TestAuditHugeEnvironmentEntry(t *testing.T) { testAuditHugeEnvironmentEntry(t, nil) }

func testAuditHugeEnvironmentEntry(t *testing.T, san *sanitizer) {
	f := newHardFixture(t, san)
	big := "BIG=" + strings.Repeat("x", 65535-4) + "DLBUNDLE_STAGE=/bogus-stage"
	for _, pos := range []string{"first", "last"} {
		env := ShimEnv(f.stage, probeEnv(f.root), EnvOptions{Debug: true})
		if pos == "first" {
			env = append([]string{big}, env...)
		} else {
			env = append(env, big)
		}
		_, stderr := f.run(t, env, nil, "name", filepath.Join(f.tree, "f"))
		if strings.Contains(stderr, "bogus-stage") {
			t.Errorf("%s: the audit module took DLBUNDLE_STAGE from inside another variable's value:\n%.500s", pos, stderr)
		}
		if !strings.Contains(stderr, "dlbundle[audit]: ") {
			t.Errorf("%s: the audit module is not active:\n%.500s", pos, stderr)
		}
	}
}

// TestShimExitIsAsyncSignalSafe: _exit writes the report, and _exit may be
// called from a signal handler or a forked child of a threaded process, so
// it must not use stdio's formatters (snprintf takes locale state and is not
// async-signal-safe). testdata/snoop.c, preloaded before the shim, reports
// any call made after the probe announced its _exit.
func TestShimExitIsAsyncSignalSafe(t *testing.T) {
	f := newHardFixture(t, nil)
	snoop := filepath.Join(f.root, "snoop.so")
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-O1", "-o", snoop, "testdata/snoop.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc snoop.c: %v\n%s", err, out)
	}
	report := filepath.Join(f.root, "report.jsonl")
	env := ShimEnv(f.stage, probeEnv(f.root), EnvOptions{Report: report})
	for i, kv := range env {
		if v, ok := strings.CutPrefix(kv, "LD_PRELOAD="); ok {
			env[i] = "LD_PRELOAD=" + snoop + ":" + v
		}
	}
	_, stderr := f.run(t, env, nil, "exit")
	if strings.Contains(stderr, "called in _exit") {
		t.Errorf("the shim's _exit is not async-signal-safe:\n%s", stderr)
	}
	rs := readReport(t, report)
	if len(rs) != 1 {
		t.Fatalf("report has %d lines, want 1 (from _exit)", len(rs))
	}
}

// TestExecRefusesTooLongStageDir: the shim's buffers hold a stage path of up
// to 1000 bytes; with a longer one it was silently inactive (the app read
// the original files). exec refuses such a stage dir before the app starts;
// a process given such a DLBUNDLE_STAGE directly says so on stderr.
func TestExecRefusesTooLongStageDir(t *testing.T) {
	p := clitest.NewProbeImage(t)
	long := p.Work
	for len(long) <= stagefmt.StageDirMax {
		long = filepath.Join(long, strings.Repeat("s", 200))
	}
	out, stderr, _, state := clitest.RunCLI(t, clitest.CleanEnv(p.Work), "exec", "--stage-dir", long, p.Image, "--", p.Original)
	if state.Success() || strings.Contains(out, "argv0=") {
		t.Fatalf("exec with a %d-byte stage dir ran the app:\nstdout: %s\nstderr: %s", len(long), out, stderr)
	}
	if !strings.Contains(stderr, "use a shorter --stage-dir") {
		t.Errorf("the error does not say what to do:\n%s", stderr)
	}
	// The longest accepted stage dir works, with the shim active.
	ok := p.Work
	for len(ok) < stagefmt.StageDirMax {
		ok = filepath.Join(ok, strings.Repeat("s", min(200, stagefmt.StageDirMax-len(ok)-1)))
	}
	if len(ok) != stagefmt.StageDirMax {
		t.Fatalf("built a %d-byte stage dir, want %d", len(ok), stagefmt.StageDirMax)
	}
	out, stderr, _, state = clitest.RunCLI(t, clitest.CleanEnv(p.Work), "exec", "--stage-dir", ok, p.Image, "--", p.Original)
	if !state.Success() || clitest.Field(out, "exe") != p.Original {
		t.Fatalf("exec with a %d-byte stage dir: %v\nstdout: %s\nstderr: %s", len(ok), state, out, stderr)
	}

	f := newHardFixture(t, nil)
	env := ShimEnv(f.stage, probeEnv(f.root), EnvOptions{})
	for i, kv := range env {
		if strings.HasPrefix(kv, EnvStage+"=") {
			env[i] = EnvStage + "=/" + strings.Repeat("x", 1000)
		}
	}
	_, stderr = f.run(t, env, nil, "name", filepath.Join(f.tree, "f"))
	if !strings.Contains(stderr, "DLBUNDLE_STAGE is longer than 1000 bytes; the shim is inactive") {
		t.Errorf("an unusable DLBUNDLE_STAGE went unsaid; stderr:\n%s", stderr)
	}
}

// TestExecBringsNoLibdl: on glibc >= 2.34, where dlsym is in libc,
// the shim must not make the app's processes load libdl.so.2: under dlbundle
// exec, no open of it, and dl_iterate_phdr shows the app's own objects plus
// exactly the shim's two.
func TestExecBringsNoLibdl(t *testing.T) {
	out, err := exec.Command("getconf", "GNU_LIBC_VERSION").Output()
	if err != nil {
		t.Fatalf("getconf GNU_LIBC_VERSION: %v", err)
	}
	var major, minor int
	if _, err := fmt.Sscanf(string(out), "glibc %d.%d", &major, &minor); err != nil {
		t.Fatalf("getconf GNU_LIBC_VERSION = %q: %v", out, err)
	}
	if major == 2 && minor < 34 {
		t.Skipf("glibc %d.%d has dlsym in libdl only", major, minor)
	}
	if libc := stagefmt.NodeLibc(); !stagefmt.LibcDefines(libc, "GLIBC_2.34") {
		t.Fatalf("glibc %d.%d, but %s (beside %s) does not define GLIBC_2.34", major, minor, libc, stagefmt.DynamicLinker())
	}
	f := newHardFixture(t, nil)
	orig := "/opt/dlbundle-test-nolibdl-" + filepath.Base(f.root) + "/bin/hard"
	st, err := os.Stat(f.probe)
	if err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(f.root, "hard.dlimg")
	w, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := image.Write(w, []image.Entry{{Path: orig, Type: image.TypeRegular, Mode: 0o100755, Size: st.Size(),
		MtimeNS: st.ModTime().UnixNano(), Kind: image.KindELFExec, SourcePath: f.probe}}, image.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	stageDir := filepath.Join(f.root, "stages")
	args := []string{"exec", "--stage-dir", stageDir, img, "--", orig, "objects"}
	if o, e, _, state := clitest.RunCLI(t, clitest.CleanEnv(f.root), args...); !state.Success() {
		t.Fatalf("dlbundle exec: %v\n%s%s", state, o, e)
	}
	log := filepath.Join(f.root, "strace.log")
	cmd := exec.Command("strace", append([]string{"-f", "-qq", "-e", "trace=%file", "-o", log, clitest.CLI(t)}, args...)...)
	cmd.Env = clitest.CleanEnv(f.root)
	shim, err := cmd.Output()
	if err != nil {
		t.Fatalf("strace dlbundle exec: %v", err)
	}
	trace, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(trace), "libdl.so") {
		t.Errorf("a process under exec opened libdl:\n%s", grepLines(string(trace), "libdl.so"))
	}
	native := runIn(t, "/", clitest.CleanEnv(f.root), f.probe, "objects")
	var own, rest []string
	for _, l := range strings.Split(strings.TrimSuffix(string(shim), "\n"), "\n") {
		if strings.HasPrefix(l, stageDir+"/") && strings.Contains(l, "/shim/") {
			own = append(own, filepath.Base(l))
		} else {
			rest = append(rest, l)
		}
	}
	// audit.so lives in a link namespace of its own, which glibc 2.36's
	// dl_iterate_phdr does not list; a glibc that lists it is accepted.
	if got := strings.Join(own, " "); got != stagefmt.Preload234Object && got != stagefmt.Preload234Object+" "+stagefmt.AuditObject {
		t.Errorf("the shim's objects in dl_iterate_phdr: %q, want %s (and %s)", got, stagefmt.Preload234Object, stagefmt.AuditObject)
	}
	if got := strings.Join(rest, "\n") + "\n"; got != native {
		t.Errorf("dl_iterate_phdr under exec minus the shim's objects:\n%s\nnatively:\n%s", got, native)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestShimSanitized runs the conformance probes and the edge tests above
// with the shim built with AddressSanitizer and UndefinedBehaviorSanitizer
// (shim/build.sh --sanitize, built once here): any report fails the run (the
// report goes to the probe's output, which must equal the native one, and
// the sanitizers' exit status is not 0). audit.so gets UBSan only (see
// sanitizedShim).
func TestShimSanitized(t *testing.T) {
	san := sanitizedShim(t)
	t.Run("conformance", func(t *testing.T) { runConformance(t, san) })
	t.Run("report", func(t *testing.T) { testReportHostilePaths(t, san) })
	t.Run("groups", func(t *testing.T) { testAccessManyGroups(t, san) })
	t.Run("names", func(t *testing.T) { testNameTooLong(t, san) })
	t.Run("environ", func(t *testing.T) { testAuditHugeEnvironmentEntry(t, san) })
	t.Run("listings", func(t *testing.T) { testTreeListings(t, san) })
	t.Run("gettext", func(t *testing.T) { testGettextSanitized(t, san) })
}

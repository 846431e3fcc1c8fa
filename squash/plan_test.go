package squash

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/trace"
)

// ld.so opening libfoo.so.1 through /lib -> usr/lib: every symlink on the
// way and the real file become entries, directories carry listings.
func TestSymlinksAlongOpenedPathsAreKept(t *testing.T) {
	root := t.TempDir()
	tree(t, root, map[string]string{
		"usr/lib/libfoo.so.1.2.3": "foo",
		"usr/lib/libfoo.so.1":     "-> libfoo.so.1.2.3",
		"usr/lib/unused.so":       "never opened",
		"lib":                     "-> usr/lib",
	})
	p := newPilot(t)
	p.read(root + "/lib/libfoo.so.1")
	plan := build(t, root, Options{}, p.done())

	wantEntry(t, plan, root+"/lib", image.TypeSymlink)
	if e := wantEntry(t, plan, root+"/usr/lib/libfoo.so.1", image.TypeSymlink); e.Target != "libfoo.so.1.2.3" {
		t.Errorf("link text %q", e.Target)
	}
	reg := wantEntry(t, plan, root+"/usr/lib/libfoo.so.1.2.3", image.TypeRegular)
	if reg.Size != 3 || reg.Kind != image.KindData || reg.Mode&0o777 != 0o644 || reg.Ino == 0 || reg.Nlink != 1 {
		t.Errorf("regular entry attributes: %+v", reg)
	}
	dir := wantEntry(t, plan, root+"/usr/lib", image.TypeDir)
	types := map[string]image.Type{"libfoo.so.1": image.TypeSymlink, "libfoo.so.1.2.3": image.TypeRegular, "unused.so": image.TypeRegular}
	// In the order the directory read returns the names (what the app sees
	// natively), each with the d_ino the read returned, which is the name's
	// own st_ino here (no mount points).
	var want []image.DirEntry
	for _, name := range readOrder(t, root+"/usr/lib") {
		want = append(want, image.DirEntry{Name: name, Type: types[name]})
	}
	for i := range want {
		var st unix.Stat_t
		if err := unix.Lstat(root+"/usr/lib/"+want[i].Name, &st); err != nil {
			t.Fatal(err)
		}
		want[i].Ino = st.Ino
	}
	var dst unix.Stat_t
	if err := unix.Lstat(root+"/usr/lib", &dst); err != nil {
		t.Fatal(err)
	}
	if dir.DirSize != dst.Size || dir.Blocks != dst.Blocks || dir.AtimeNS != unix.TimespecToNsec(dst.Atim) || dir.AtimeNS == 0 {
		t.Errorf("directory attributes dir_size %d blocks %d atime %d, lstat says %d %d %d",
			dir.DirSize, dir.Blocks, dir.AtimeNS, dst.Size, dst.Blocks, unix.TimespecToNsec(dst.Atim))
	}
	if !slices.Equal(dir.Listing, want) || len(want) != 3 {
		t.Errorf("listing %v, want %v", dir.Listing, want)
	}
	var parent unix.Stat_t
	if err := unix.Lstat(root+"/usr", &parent); err != nil || dir.DotDotIno != parent.Ino {
		t.Errorf("dotdot_ino %d, want the parent's inode %d (%v)", dir.DotDotIno, parent.Ino, err)
	}
	// "." and ".." where the directory read returned them (with the names).
	var all []string
	for i, name := range readOrderAll(t, root+"/usr/lib") {
		if name == "." || name == ".." {
			all = append(all, fmt.Sprintf("%s@%d", name, i))
		}
	}
	dots := []int{0, 1}
	if dir.Dots != nil {
		dots = dir.Dots
	}
	if want := []string{fmt.Sprintf(".@%d", dots[0]), fmt.Sprintf("..@%d", dots[1])}; !slices.Equal(all, want) && !slices.Equal(all, []string{want[1], want[0]}) {
		t.Errorf("dots %v: the directory read returns %v", dir.Dots, all)
	}
	wantAbsent(t, plan, root+"/usr/lib/unused.so")
	wantAbsent(t, plan, root+"/lib/libfoo.so.1") // stored at its real path only
	if reg.Order < entriesByPath(plan)[root+"/usr/lib/libfoo.so.1"].Order {
		t.Errorf("the file comes before the symlink that leads to it")
	}
	// Ancestors outside the included prefix (/tmp) are node-local: no entry.
	wantAbsent(t, plan, "/tmp")
	wantEntry(t, plan, root, image.TypeDir)
}

func TestFilesWrittenDuringThePilotAreNotBundled(t *testing.T) {
	root := t.TempDir()
	tree(t, root, map[string]string{"app/in.dat": "input", "app/out.dat": "output", "app/log": "log", "app/new": "renamed"})
	p := newPilot(t)
	p.read(root + "/app/in.dat")
	fd := 4
	p.ev(trace.Event{Op: trace.OpOpen, Path: root + "/app/out.dat", Flags: 0x241, FD: &fd}) // O_WRONLY|O_CREAT|O_TRUNC
	p.read(root + "/app/out.dat")
	p.read(root + "/app/log")
	p.ev(trace.Event{Op: trace.OpOpen, Path: root + "/app/log", Flags: 0x2, FD: &fd}) // O_RDWR, later
	p.ev(trace.Event{Op: trace.OpRename, Path: root + "/app/tmp", Path2: root + "/app/new"})
	p.read(root + "/app/new")
	p.ev(trace.Event{Op: trace.OpUnlink, Path: root + "/app/gone", Err: "ENOENT"}) // failed: changed nothing
	plan := build(t, root, Options{}, p.done())

	wantEntry(t, plan, root+"/app/in.dat", image.TypeRegular)
	for _, f := range []string{"out.dat", "log", "new", "tmp"} {
		wantAbsent(t, plan, root+"/app/"+f)
	}
	if got := plan.Report.Skipped[ReasonWritten]; got != 4 {
		t.Errorf("skipped as written: %d, want 4 (out.dat, log, tmp, new); %v", got, plan.Report.Skipped)
	}
}

func TestMissingPathsKeptOnlyWhereTheListingIsKnown(t *testing.T) {
	root := t.TempDir()
	tree(t, root, map[string]string{"usr/lib/libfoo.so": "foo", "lib": "-> usr/lib", "usr/lib/later.so": "created after the pilot", "usr/lib/plain.egg": "zip"})
	p := newPilot(t)
	p.fail(trace.OpOpen, root+"/lib/tls/libfoo.so", "ENOENT") // ld.so hwcaps probe
	p.fail(trace.OpStat, root+"/usr/lib/libbar.so", "ENOENT")
	p.fail(trace.OpOpen, root+"/usr/lib/later.so", "ENOENT")
	p.fail(trace.OpOpen, "/etc/dlbundle-test-no-such-file", "ENOENT")
	p.fail(trace.OpOpen, root+"/usr/lib/libfoo.so/x", "ENOTDIR")
	p.fail(trace.OpStat, root+"/usr/lib/plain.egg/mod.py", "ENOTDIR")
	p.fail(trace.OpOpen, root+"/usr/lib/secret", "EACCES")
	p.fail(trace.OpReadlink, root+"/usr/lib/libfoo.so", "EINVAL") // exists, not a symlink
	p.read(root + "/usr/lib/libfoo.so")
	plan := build(t, root, Options{}, p.done())

	wantEntry(t, plan, root+"/usr/lib/tls", image.TypeMissing) // the first name that is absent
	wantEntry(t, plan, root+"/usr/lib/libbar.so", image.TypeMissing)
	wantAbsent(t, plan, root+"/usr/lib/later.so")
	wantAbsent(t, plan, "/etc/dlbundle-test-no-such-file")
	wantAbsent(t, plan, "/etc")
	wantAbsent(t, plan, root+"/usr/lib/secret")
	// ENOTDIR is answered from the regular file standing where a directory was expected.
	wantEntry(t, plan, root+"/usr/lib/libfoo.so", image.TypeRegular)
	// ... also when the pilot never read it (a file on sys.path: Python probes plain.egg/mod.py).
	wantEntry(t, plan, root+"/usr/lib/plain.egg", image.TypeRegular)
	wantAbsent(t, plan, root+"/usr/lib/libfoo.so/x")
	r := plan.Report.Skipped
	if r[ReasonAppeared] != 1 || r[ReasonEtc] != 1 || r[ReasonOtherError] != 1 {
		t.Errorf("skipped: %v", r)
	}
}

func TestPrefixRules(t *testing.T) {
	root := t.TempDir()
	tree(t, root, map[string]string{"opt/app/lib/a.so": "a", "opt/app/share/b.dat": "b", "opt/app/share/keep/c.dat": "c"})
	p := newPilot(t)
	p.read(root + "/opt/app/lib/a.so")
	p.read(root + "/opt/app/share/b.dat")
	p.read(root + "/opt/app/share/keep/c.dat")
	p.read("/etc/hostname")
	p.ev(trace.Event{Op: trace.OpOpen, Path: "/proc/self/maps"})
	p.ev(trace.Event{Op: trace.OpStat, Path: "/dev/null"})
	plan := build(t, root, Options{Exclude: []string{root + "/opt/app/share"}, Include: []string{root + "/opt/app/share/keep"}}, p.done())

	wantEntry(t, plan, root+"/opt/app/lib/a.so", image.TypeRegular)
	wantEntry(t, plan, root+"/opt/app/share/b.dat", image.TypeExternal) // excluded: recorded, not bundled
	wantEntry(t, plan, root+"/opt/app/share/keep/c.dat", image.TypeRegular)
	wantAbsent(t, plan, root+"/opt/app/share") // an excluded directory: node-local, no entry
	wantEntry(t, plan, "/etc/hostname", image.TypeExternal)
	wantAbsent(t, plan, "/proc/self/maps")
	wantAbsent(t, plan, "/dev/null")
	if r := plan.Report.Skipped; r[ReasonPseudoFS] != 2 || r[ReasonEtc] != 1 || r[ReasonUserExclude] != 1 {
		t.Errorf("skipped: %v", r)
	}
}

func TestRulesLongestPrefixWins(t *testing.T) {
	rs, err := NewRules([]string{"/etc/app", "/tmp/x/"}, []string{"/usr/local"})
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]Verdict{
		"/etc/app/conf": Bundle, "/etc/apparmor": Exclude, "/etc": Exclude, "/tmp/x": Bundle, "/tmp/y": Skip,
		"/usr/local/lib/a": Exclude, "/usr/localx": Bundle, "/proc/1/maps": Skip, "/usr/lib/a.so": Bundle,
	} {
		if got, _ := rs.Match(p); got != want {
			t.Errorf("%s: verdict %d, want %d", p, got, want)
		}
	}
	for _, bad := range [][2][]string{{{"/proc/self"}, nil}, {{"relative"}, nil}, {{"/opt"}, {"/opt"}}} {
		if _, err := NewRules(bad[0], bad[1]); err == nil {
			t.Errorf("include %v exclude %v accepted", bad[0], bad[1])
		}
	}
}

func TestChangedAndVanishedSincePilot(t *testing.T) {
	root := t.TempDir()
	tree(t, root, map[string]string{"a.so": "aaaa", "b.so": "bbbb"})
	p := newPilot(t)
	p.read(root + "/a.so")
	p.read(root + "/b.so")
	tr := p.done()
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(root+"/a.so", later, later); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(root + "/b.so"); err != nil {
		t.Fatal(err)
	}
	var warnings []string
	plan := build(t, root, Options{Warn: func(s string) { warnings = append(warnings, s) }}, tr)
	wantAbsent(t, plan, root+"/a.so")
	wantAbsent(t, plan, root+"/b.so")
	if !slices.Equal(plan.Report.Changed, []string{root + "/a.so"}) || !slices.Equal(plan.Report.Vanished, []string{root + "/b.so"}) {
		t.Errorf("changed %v vanished %v", plan.Report.Changed, plan.Report.Vanished)
	}
	if len(warnings) != 2 {
		t.Errorf("warnings %q", warnings)
	}
	plan = build(t, root, Options{AllowChanged: true}, tr)
	if e := wantEntry(t, plan, root+"/a.so", image.TypeRegular); e.MtimeNS != later.UnixNano() {
		t.Errorf("bundled mtime %d, want the current %d", e.MtimeNS, later.UnixNano())
	}
}

// Two ranks: the union, each path once, in order of first use (time since
// each pilot's start).
func TestMergeRanks(t *testing.T) {
	root := t.TempDir()
	tree(t, root, map[string]string{"a": "1", "b": "2", "c": "3"})
	r0, r1 := newPilot(t), newPilot(t)
	r0.now, r1.now = 5000, 0
	r0.read(root + "/a")
	r0.read(root + "/c")
	r1.read(root + "/b")
	r1.read(root + "/a")
	r1.ev(trace.Event{Op: trace.OpUnlink, Path: root + "/c"}) // rank 1 removes c: volatile for all
	t0 := r0.done()
	t1 := r1.done()
	t1.End = nil // rank 1 was cut short
	plan := build(t, root, Options{}, t0, t1)
	var regs []string
	for _, e := range plan.Entries {
		if e.Type == image.TypeRegular {
			regs = append(regs, filepath.Base(e.Path))
		}
	}
	if !slices.Equal(regs, []string{"b", "a"}) {
		t.Errorf("bundled %v, want [b a]", regs)
	}
	if len(plan.Pilots) != 2 || plan.Report.Traces != 2 || len(plan.Report.Incomplete) != 1 || len(plan.Report.Warnings) != 0 {
		t.Errorf("pilots %d, report %+v", len(plan.Pilots), plan.Report)
	}
	t1.Header.Command = []string{"other"}
	if plan = build(t, root, Options{}, t0, t1); len(plan.Report.Warnings) != 1 || !strings.Contains(plan.Report.Warnings[0], "another command (other)") {
		t.Errorf("traces of different commands merged without a warning: %q", plan.Report.Warnings)
	}
}

// writePyc writes a timestamp-based bytecode cache header for src, as CPython does.
func writePyc(t *testing.T, pyc, src string) {
	st, err := os.Stat(src)
	if err != nil {
		t.Fatal(err)
	}
	h := make([]byte, 16, 32)
	copy(h, []byte{0xa7, 0x0d, '\r', '\n'})
	binary.LittleEndian.PutUint32(h[8:], uint32(st.ModTime().Unix()))
	binary.LittleEndian.PutUint32(h[12:], uint32(st.Size()))
	h = append(h, "code"...)
	if err := os.MkdirAll(filepath.Dir(pyc), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pyc, h, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The pilot writes __pycache__/m.cpython-311.pyc on first import; it is a
// cache, valid for its source at build time, so it is bundled (and the
// directories it was written to are not treated as changed).
func TestPycWrittenByPilotIsBundledWhenValid(t *testing.T) {
	for _, stale := range []bool{false, true} {
		root := t.TempDir()
		tree(t, root, map[string]string{"pkg/m.py": "x = 1\n", "pkg/n.py": "y = 2\n"})
		p := newPilot(t)
		// Python lists the package before the caches exist: their appearance is the pilot's own doing.
		p.ev(trace.Event{Op: trace.OpListdir, Path: root + "/pkg", Entries: []trace.DirEntry{{Name: "m.py", Type: "reg"}, {Name: "n.py", Type: "reg"}}})
		for _, m := range []string{"m", "n"} {
			pyc := root + "/pkg/__pycache__/" + m + ".cpython-311.pyc"
			p.fail(trace.OpOpen, pyc, "ENOENT")
			p.read(root + "/pkg/" + m + ".py")
			p.ev(trace.Event{Op: trace.OpMkdir, Path: root + "/pkg/__pycache__"})
			fd := 5
			p.ev(trace.Event{Op: trace.OpOpen, Path: pyc + ".140235", Flags: 0xc1, FD: &fd}) // O_WRONLY|O_CREAT|O_EXCL
			p.ev(trace.Event{Op: trace.OpRename, Path: pyc + ".140235", Path2: pyc})
			writePyc(t, pyc, root+"/pkg/"+m+".py")
		}
		tr := p.done()
		if stale {
			if err := os.WriteFile(root+"/pkg/n.py", []byte("y = 22\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		plan := build(t, root, Options{}, tr)
		e := wantEntry(t, plan, root+"/pkg/__pycache__/m.cpython-311.pyc", image.TypeRegular)
		if e.Kind != image.KindPyBytecode {
			t.Errorf("kind %s", e.Kind)
		}
		wantEntry(t, plan, root+"/pkg/__pycache__", image.TypeDir)
		wantEntry(t, plan, root+"/pkg", image.TypeDir)
		wantAbsent(t, plan, root+"/pkg/__pycache__/m.cpython-311.pyc.140235")
		if stale {
			wantAbsent(t, plan, root+"/pkg/__pycache__/n.cpython-311.pyc")
			wantAbsent(t, plan, root+"/pkg/n.py") // changed since the pilot too
			if plan.Report.Skipped[ReasonStalePyc] != 1 {
				t.Errorf("skipped %v", plan.Report.Skipped)
			}
		} else {
			wantEntry(t, plan, root+"/pkg/__pycache__/n.cpython-311.pyc", image.TypeRegular)
			if len(plan.Report.PycCaches) != 2 || len(plan.Report.Warnings) != 0 {
				t.Errorf("report %+v", plan.Report)
			}
		}
	}
}

// A .pyc that is really an output (written by the app, not in __pycache__)
// stays volatile.
func TestPycOutsidePycacheStaysVolatile(t *testing.T) {
	root := t.TempDir()
	tree(t, root, map[string]string{"out/m.pyc": "x"})
	p := newPilot(t)
	fd := 3
	p.ev(trace.Event{Op: trace.OpOpen, Path: root + "/out/m.pyc", Flags: 0x241, FD: &fd})
	plan := build(t, root, Options{}, p.done())
	wantAbsent(t, plan, root+"/out/m.pyc")
}

func TestDirectoryChangedDuringPilot(t *testing.T) {
	root := t.TempDir()
	tree(t, root, map[string]string{"work/input": "i", "work/result": "r", "scan/x": "x", "scan/made": "m"})
	p := newPilot(t)
	p.ev(trace.Event{Op: trace.OpListdir, Path: root + "/scan"})
	p.ev(trace.Event{Op: trace.OpMkdir, Path: root + "/scan/made"})
	p.read(root + "/work/input")
	fd := 3
	p.ev(trace.Event{Op: trace.OpOpen, Path: root + "/work/result", Flags: 0x241, FD: &fd})
	p.fail(trace.OpStat, root+"/work/nothing", "ENOENT")
	plan := build(t, root, Options{}, p.done())
	wantAbsent(t, plan, root+"/scan")                         // its listing is an output of the pilot
	wantAbsent(t, plan, root+"/work")                         // the same, although input is below it
	wantEntry(t, plan, root+"/work/input", image.TypeRegular) // still bundled
	wantAbsent(t, plan, root+"/work/nothing")                 // no listing to say it is absent
	if len(plan.Report.Warnings) != 0 || plan.Report.Skipped[ReasonDirChanged] != 2 ||
		!slices.Equal(plan.Report.OutputDirs, []string{root + "/scan", root + "/work"}) {
		t.Errorf("report %+v", plan.Report)
	}
}

// The kernel opens a script's #! interpreter and an ELF's PT_INTERP itself;
// no trace shows them, build adds them for exec'd files.
func TestExecAddsInterpreters(t *testing.T) {
	root := t.TempDir()
	tree(t, root, map[string]string{"bin/run": "#!" + root + "/bin/sh -e\necho hi\n", "bin/cat.txt": "#!" + root + "/bin/nothere\n"})
	copyFile(t, "/usr/bin/dash", root+"/bin/sh")
	p := newPilot(t)
	p.ev(trace.Event{Op: trace.OpExec, Path: root + "/bin/run"})
	p.read(root + "/bin/cat.txt") // read, not exec'd: its #! line means nothing
	plan := build(t, root, Options{}, p.done())
	if e := wantEntry(t, plan, root+"/bin/run", image.TypeRegular); e.Kind != image.KindScript {
		t.Errorf("run kind %s", e.Kind)
	}
	if e := wantEntry(t, plan, root+"/bin/sh", image.TypeRegular); e.Kind != image.KindELFExec {
		t.Errorf("sh kind %s", e.Kind)
	}
	wantEntry(t, plan, "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", image.TypeRegular)
	wantAbsent(t, plan, root+"/bin/nothere")
}

// Python stats the .py of every .pyc it loads: small stat'd-only files are
// bundled so that the ranks' stats are answered from the image; big ones
// (data whose size the app checks) stay external, with their attributes.
func TestStatOnlyFiles(t *testing.T) {
	root := t.TempDir()
	tree(t, root, map[string]string{"m.py": "x = 1\n", "big.dat": ""})
	if err := os.Truncate(root+"/big.dat", StatOnlyMaxSize+1); err != nil {
		t.Fatal(err)
	}
	p := newPilot(t)
	p.ev(trace.Event{Op: trace.OpStat, Path: root + "/m.py"})
	p.ev(trace.Event{Op: trace.OpStat, Path: root + "/big.dat"})
	plan := build(t, root, Options{}, p.done())
	if e := wantEntry(t, plan, root+"/m.py", image.TypeRegular); e.Kind != image.KindPySource {
		t.Errorf("kind %s", e.Kind)
	}
	if e := wantEntry(t, plan, root+"/big.dat", image.TypeExternal); e.Ino == 0 || e.Size != 0 || e.MtimeNS == 0 {
		t.Errorf("external entry attributes %+v", e)
	}
	if plan.Report.Skipped[ReasonStatOnlyLarge] != 1 {
		t.Errorf("skipped %v", plan.Report.Skipped)
	}
}

// A directory whose names changed between the pilot and the build (a package
// installed meanwhile) is reported: imports may now go another way.
func TestListingChangedSincePilotIsReported(t *testing.T) {
	root := t.TempDir()
	tree(t, root, map[string]string{"site/a.py": "", "site/c.py": ""})
	p := newPilot(t)
	p.ev(trace.Event{Op: trace.OpListdir, Path: root + "/site", Entries: []trace.DirEntry{{Name: "a.py", Type: "reg"}, {Name: "b.py", Type: "reg"}}})
	plan := build(t, root, Options{}, p.done())
	wantEntry(t, plan, root+"/site", image.TypeDir)
	if !slices.Equal(plan.Report.ListingsChanged, []string{root + "/site"}) || len(plan.Report.Warnings) != 1 ||
		!strings.Contains(plan.Report.Warnings[0], "new: c.py; gone: b.py") {
		t.Errorf("report %+v", plan.Report)
	}
}

// Debian's alternatives: /usr/lib/.../libblas.so.3 -> /etc/alternatives/... ->
// /usr/lib/.../blas/libblas.so.3. The symlink under the excluded prefix is
// kept (it is on the way to a bundled file); its directories are node-local.
func TestSymlinkThroughExcludedPrefix(t *testing.T) {
	root := t.TempDir()
	tree(t, root, map[string]string{
		"usr/lib/blas/libblas.so.3":      "blas",
		"usr/lib/libblas.so.3":           "-> " + root + "/conf/alternatives/libblas.so.3",
		"conf/alternatives/libblas.so.3": "-> " + root + "/usr/lib/blas/libblas.so.3",
		"conf/other":                     "x",
	})
	p := newPilot(t)
	p.read(root + "/usr/lib/libblas.so.3")
	plan := build(t, root, Options{Exclude: []string{root + "/conf"}}, p.done())
	wantEntry(t, plan, root+"/usr/lib/libblas.so.3", image.TypeSymlink)
	wantEntry(t, plan, root+"/conf/alternatives/libblas.so.3", image.TypeSymlink)
	wantAbsent(t, plan, root+"/conf/alternatives")
	wantAbsent(t, plan, root+"/conf")
	wantEntry(t, plan, root+"/usr/lib/blas/libblas.so.3", image.TypeRegular)
}

// The build reads its sources (file kinds, bytecode headers, listings, the
// image writer's content) without moving their access times, so the atime it
// records is the one the next build of the same inputs records too. The
// atimes are set older than mtime: relatime would move them on any read.
func TestBuildLeavesAccessTimes(t *testing.T) {
	root := t.TempDir()
	tree(t, root, map[string]string{"app/lib.so": "\x7fELF not really", "app/main.py": "print(1)\n"})
	old := time.Now().Add(-48 * time.Hour)
	for _, rel := range []string{"app", "app/lib.so", "app/main.py"} {
		if err := os.Chtimes(filepath.Join(root, rel), old, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	atime := func(rel string) int64 {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(root, rel), &st); err != nil {
			t.Fatal(err)
		}
		return unix.TimespecToNsec(st.Atim)
	}
	before := map[string]int64{"app": atime("app"), "app/lib.so": atime("app/lib.so"), "app/main.py": atime("app/main.py")}
	p := newPilot(t)
	p.read(root + "/app/lib.so")
	p.read(root + "/app/main.py")
	plan := build(t, root, Options{}, p.done())
	var entries []image.Entry
	for _, e := range plan.Entries {
		if strings.HasPrefix(e.Path, root+"/app") {
			entries = append(entries, e)
		}
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "x.dlimg"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := image.Write(f, plan.Entries, image.WriteOptions{Level: 1}); err != nil {
		t.Fatal(err)
	}
	for rel, want := range before {
		if got := atime(rel); got != want {
			t.Errorf("%s: the build moved atime from %d to %d", rel, want, got)
		}
		if e := entriesByPath(plan)[root+"/"+rel]; e.AtimeNS != want {
			t.Errorf("%s: recorded atime_ns %d, lstat said %d", rel, e.AtimeNS, want)
		}
	}
	if len(entries) != 3 {
		t.Errorf("entries below app: %d, want 3", len(entries))
	}
}

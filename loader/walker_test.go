package loader

// The differential walker test: the same libc calls
// (realpath, canonicalize_file_name, __realpath_chk, stat, lstat, statx,
// readlink, open, fopen, opendir, access, openat/fstatat/readlinkat relative
// to a dirfd, after chdir, mkdir) made natively and under the shim on random
// paths over a generated tree with symlinks (relative, absolute, loops, into
// and out of the bundled part, dangling, through directories another user
// cannot search), partly bundled into an image; the outputs of
// testdata/walker.c are compared line by line: results, errno and what
// realpath leaves in its buffer. Each block of calls runs as root and as
// nobody (65534), in a child process of its own.
//
//   go test -run 'TestWalker' ./loader/               the probes and 300 random blocks
//   go test -run '^$' -fuzz FuzzWalker -parallel 1 ./loader/

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/clitest"
	"github.com/dlbundle/dlbundle/internal/treeimage"
)

// walkerTree builds the tree below root. "in" is bundled whole, "out" is
// not (an external name in root's listing), except out/deep/b, bundled
// without out and out/deep: a path walks through a prefix the image does
// not hold into one it does (the look-ahead that realpath once got wrong).
func walkerTree(t testing.TB, root string) {
	t.Helper()
	dirs := map[string]os.FileMode{"in/a/sub": 0o755, "in/locked/inner": 0o755, "in/locked": 0o700, "in/w": 0o777, "in/empty": 0o755,
		"in/ro": 0o555, "out/d": 0o755, "out/locked": 0o700, "out/deep/b/c": 0o755}
	for d, m := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(filepath.Join(root, d), m)
	}
	files := map[string]string{"in/a/f": "f\n", "in/a/sub/h": "h\n", "in/a/secret": "s\n", "in/locked/x": "x\n",
		"in/locked/inner/y": "y\n", "in/w/g": "g\n", "in/ro/r": "r\n", "out/file": "out\n", "out/d/e": "e\n",
		"out/locked/z": "z\n", "out/deep/b/c/k": "k\n", "out/deep/b/top.txt": "top\n"}
	for f, c := range files {
		if err := os.WriteFile(filepath.Join(root, f), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(root, "in/a/secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{
		"in/rel": "a/f", "in/dir": "a", "in/abs": root + "/in/a/sub", "in/up": "..", "in/out": "../out/file",
		"in/outdir": "../out", "in/deep": "../out/deep/b", "in/loop1": "loop2", "in/loop2": "loop1", "in/self": "self",
		"in/dangling": "nowhere", "in/dangabs": root + "/nowhere/x", "in/chain": "dir/sub", "in/slash": "a/",
		"in/dots": "a/../a/sub/..", "in/root": "/", "in/tmp": "/usr/share/doc", "in/lockedlnk": "locked/x",
		"in/a/sub/back": "../../rel", "in/filedir": "a/f/x", "in/dotdotf": "a/f/..",
		"out/in": "../in/a", "out/inabs": root + "/in/dir", "out/loop": "loop", "out/dangling": "gone",
		"out/deep/b/lnk": "../../../in/a/f", "out/deep/b/up": "../..", "out/deep/b/c/abs": root + "/out/deep/b/top.txt",
	}
	for l, tgt := range links {
		if err := os.Symlink(tgt, filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
}

// walkerParts are the components random paths are made of.
var walkerParts = []string{"in", "out", "a", "f", "sub", "h", "secret", "locked", "x", "inner", "y", "w", "g", "empty",
	"ro", "r", "file", "d", "e", "z", "deep", "b", "c", "k", "top.txt", "rel", "dir", "abs", "up", "outdir",
	"loop1", "loop2", "self", "dangling", "dangabs", "chain", "slash", "dots", "root", "tmp", "lockedlnk", "back",
	"filedir", "dotdotf", "inabs", "loop", "lnk", ".", "..", "", "nope", strings.Repeat("n", 256), "tree"}

// walkerAbs are absolute starting points outside the tree (the issue's
// probes: system files the image does not hold). Not /tmp: other programs
// change it meanwhile (its nlink and times differ between two runs).
var walkerAbs = []string{"/usr/lib/python3.11/json/__init__.py", "/usr/share/doc/bash/copyright", "/usr/share/doc", "/",
	"/proc/self/cwd", "/proc/self/exe", "/dev/null", "/etc/ssl/certs/..", "/usr/bin/../lib", "/nonexistent/x"}

var walkerCmds = []string{"rp", "rpn", "canon", "rpchk", "stat", "lstat", "statx", "readlink", "open", "fopen",
	"opendir", "access", "cd", "at", "mkdir"}

// walkerDecode turns fuzz input into one block of commands for the walker.
// Input starting with '#' is literal: the rest is the block, with ROOT
// standing for the tree (the seeds of the probes are written so).
// Otherwise each command takes bytes: the command, a path start (the tree,
// relative to the tree, one of walkerAbs, or "/"), a count of components,
// each component (a slash doubled or trailing now and then), and for
// access a mode, for at a second path. The first byte's low bit chooses
// the user (root or nobody).
func walkerDecode(data []byte, root string) (block string, nobody bool) {
	if len(data) > 0 && data[0] == '#' {
		s := strings.ReplaceAll(string(data[1:]), "ROOT", root)
		nobody = strings.HasPrefix(s, "nobody\n")
		var b strings.Builder
		for _, l := range strings.Split(s, "\n") {
			if strings.ContainsRune(l, 0) || l == "end" || l == "" || l == "nobody" || len(l) > 60000 {
				continue
			}
			// Only nobody writes: root could create directories anywhere.
			if c, rest, _ := strings.Cut(l, "\t"); c == "mkdir" && !nobody {
				l = "stat\t" + rest
			}
			b.WriteString(l + "\n")
		}
		return b.String(), nobody
	}
	i := 0
	next := func() int {
		if i >= len(data) {
			return 0
		}
		i++
		return int(data[i-1])
	}
	if len(data) > 0 {
		nobody = data[0]&1 == 1
		i = 1
	}
	path := func() string {
		var p string
		switch s := next(); s % 5 {
		case 0:
			p = root
		case 1:
			p = ""
		case 2:
			p = walkerAbs[(s/5)%len(walkerAbs)]
		case 3:
			p = root + "/in"
		case 4:
			p = "/"
		}
		n := next() % 7
		for k := 0; k < n; k++ {
			c := next()
			part := walkerParts[c%len(walkerParts)]
			if c%4 != 0 {
				part = walkerChild(root, p, c/4, part)
			}
			sep := "/"
			if c/len(walkerParts) == 1 {
				sep = "//"
			}
			if p == "" {
				p = part
			} else if strings.HasSuffix(p, "/") {
				p += part
			} else {
				p += sep + part
			}
		}
		if next()%9 == 8 {
			p += "/"
		}
		if p == "" {
			p = "."
		}
		if next()%23 == 22 {
			p += strings.Repeat("/.", 2100) // longer than PATH_MAX
		}
		return p
	}
	var b strings.Builder
	for n := 0; i < len(data) && n < 12; n++ {
		cmd := walkerCmds[next()%len(walkerCmds)]
		if cmd == "mkdir" && !nobody {
			cmd = "stat" // only nobody writes: root could create directories anywhere
		}
		switch cmd {
		case "access":
			b.WriteString(cmd + "\t" + path() + "\t" + strconv.Itoa(next()%8) + "\n")
		case "at":
			b.WriteString(cmd + "\t" + path() + "\t" + path() + "\n")
		default:
			b.WriteString(cmd + "\t" + path() + "\n")
		}
	}
	return b.String(), nobody
}

var procIno, procPid = regexp.MustCompile(`ino=[0-9]+`), regexp.MustCompile(`/proc/[0-9]+`)

// walkerChild picks a name that exists in the directory p leads to, when it
// leads to one inside the tree (the tree as root sees it, followed through
// its symlinks), so that random paths go deep; else part.
func walkerChild(root, p string, c int, part string) string {
	if p == "" {
		p = root
	} else if p[0] != '/' {
		p = root + "/" + p
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil || (real != root && !strings.HasPrefix(real, root+"/")) {
		return part
	}
	des, err := os.ReadDir(real)
	if err != nil || len(des) == 0 {
		return part
	}
	return des[c%len(des)].Name()
}

// walkerProc is one walker process: its block protocol on stdin/stdout.
type walkerProc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startWalker(t testing.TB, bin, dir string, env []string, cred *syscall.Credential, base int64) *walkerProc {
	t.Helper()
	cmd := exec.Command(bin, strconv.FormatInt(base, 10))
	cmd.Env, cmd.Dir = env, dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return &walkerProc{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<16)}
}

// run sends one block and returns the walker's output for it.
func (w *walkerProc) run(block string) (string, error) {
	if _, err := io.WriteString(w.in, block+"end\n"); err != nil {
		return "", err
	}
	timer := time.AfterFunc(30*time.Second, func() { w.cmd.Process.Kill() })
	defer timer.Stop()
	var b strings.Builder
	for {
		l, err := w.out.ReadString('\n')
		if err != nil {
			return b.String(), fmt.Errorf("walker: %v after %q", err, b.String())
		}
		if l == "done\n" {
			return b.String(), nil
		}
		if strings.Contains(l, "/proc/") {
			// procfs numbers each process's inodes anew; /proc/self is the pid
			l = procIno.ReplaceAllString(l, "ino=(proc)")
			l = procPid.ReplaceAllString(l, "/proc/PID")
		}
		b.WriteString(l)
	}
}

func (w *walkerProc) stop() {
	w.in.Close()
	w.cmd.Wait()
}

// walkerFixture is the tree, its stage, and four walkers: native and under
// the shim, as root and as nobody. When a block changed the tree (a mkdir
// that succeeded, natively and under the shim), the image no longer shows
// it: the stage is built again from the tree as it is now.
type walkerFixture struct {
	root, bin, scratch string
	base               int64
	stage              string
	gen                int
	snap               string
	native, shim       [2]*walkerProc // [0] root, [1] nobody
	blocks, lines      int
}

var walkerCreds = [2]*syscall.Credential{nil, {Uid: 65534, Gid: 65534}}

func newWalkerFixture(t testing.TB) *walkerFixture {
	t.Helper()
	if os.Getuid() != 0 {
		t.Fatal("the walker test runs as root (it compares root's and nobody's view)")
	}
	// A fuzz worker the coordinator stops runs no cleanup: remove what
	// walkers of processes that are gone left.
	old, _ := filepath.Glob(filepath.Join(os.TempDir(), "dlbundle-walker-*"))
	for _, d := range old {
		var pid int
		if _, err := fmt.Sscanf(filepath.Base(d), "dlbundle-walker-%d-", &pid); err == nil && syscall.Kill(pid, 0) != nil {
			os.RemoveAll(d)
		}
	}
	scratch, err := os.MkdirTemp("", fmt.Sprintf("dlbundle-walker-%d-", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(scratch, 0o755); err != nil {
		t.Fatal(err)
	}
	f := &walkerFixture{scratch: scratch, root: filepath.Join(scratch, "tree"), bin: filepath.Join(scratch, "walker")}
	t.Cleanup(f.close)
	if out, err := exec.Command("gcc", "-O1", "-Wall", "-o", f.bin, "testdata/walker.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc walker.c: %v\n%s", err, out)
	}
	// Times are not compared: a mkdir that succeeded (then rmdir) changes
	// its directory's mtime and ctime natively, which an image made before
	// cannot show; every time prints as "new" (TestConformance compares
	// times). So the stage is built again only when names change.
	f.base = time.Now().Unix() - 1
	walkerTree(t, f.root)
	f.snap = f.snapshot()
	f.restage(t)
	return f
}

// snapshot is what the walker compares of the tree: its names, their
// types, modes and inodes.
func (f *walkerFixture) snapshot() string {
	var b strings.Builder
	filepath.Walk(f.root, func(p string, fi os.FileInfo, err error) error {
		if err == nil {
			st := fi.Sys().(*syscall.Stat_t)
			fmt.Fprintf(&b, "%s %o %d %d\n", p, st.Mode, st.Ino, st.Nlink)
		}
		return nil
	})
	return b.String()
}

// restage builds the image of the tree (in, out/deep/b and root's own
// listing) and its stage, and starts the walkers.
func (f *walkerFixture) restage(t testing.TB) {
	t.Helper()
	for i := range f.native {
		if f.native[i] != nil {
			f.native[i].stop()
			f.shim[i].stop()
		}
	}
	if f.stage != "" {
		os.RemoveAll(filepath.Dir(f.stage))
	}
	f.gen++
	dir := filepath.Join(f.scratch, fmt.Sprintf("stage%d", f.gen))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var entries []image.Entry
	for _, e := range treeimage.Entries(t, filepath.Join(f.root, "in")) {
		if e.Path == f.root || strings.HasPrefix(e.Path, f.root+"/") {
			entries = append(entries, e)
		}
	}
	filepath.Walk(filepath.Join(f.root, "out/deep/b"), func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, treeimage.Entry(t, p))
		return nil
	})
	f.stage = stageEntries(t, dir, entries)
	// nobody's processes read the stage too (a stage is its user's own,
	// 0700 where it made directories of its own): every directory in it
	// gets r-x for others; the shim decides what the originals allow.
	filepath.Walk(f.stage, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.IsDir() {
			err = os.Chmod(p, fi.Mode().Perm()|0o055)
		}
		if err != nil {
			t.Fatal(err)
		}
		return nil
	})
	base := []string{"PATH=/usr/bin:/bin", "HOME=/", "LANG=C.UTF-8"}
	shimEnv := ShimEnv(f.stage, base, EnvOptions{})
	for i, cred := range walkerCreds {
		f.native[i] = startWalker(t, f.bin, f.root, base, cred, f.base)
		f.shim[i] = startWalker(t, f.bin, f.root, shimEnv, cred, f.base)
	}
}

func (f *walkerFixture) close() {
	for i := range f.native {
		if f.native[i] != nil {
			f.native[i].stop()
			f.shim[i].stop()
		}
	}
	if os.Getenv("WALKER_KEEP") != "" {
		fmt.Fprintf(os.Stderr, "walker: kept %s (stage %s)\n", f.scratch, f.stage)
		return
	}
	os.RemoveAll(f.scratch)
}

// check runs one block natively and under the shim and compares.
func (f *walkerFixture) check(t testing.TB, block string, nobody bool) {
	t.Helper()
	if block == "" {
		return
	}
	u := 0
	if nobody {
		u = 1
	}
	native, err := f.native[u].run(block)
	if err != nil {
		t.Fatalf("native: %v", err)
	}
	shim, err := f.shim[u].run(block)
	if err != nil {
		t.Fatalf("shim: %v\nblock:\n%s", err, block)
	}
	native, shim = f.steady(native), f.steady(shim)
	f.blocks++
	f.lines += strings.Count(native, "\n")
	if os.Getenv("WALKER_SHOW") != "" {
		fmt.Fprint(os.Stderr, native)
	}
	if native != shim {
		who := "root"
		if nobody {
			who = "nobody"
		}
		d := clitest.LineDiff(native, shim, "native", "shim", 0)
		t.Fatalf("as %s, the shim differs (tree %s):\n%sblock:\n%s", who, f.root, d, block)
	}
	if s := f.snapshot(); s != f.snap {
		f.snap = s
		f.restage(t)
	}
}

// volatileDirs change while the test runs (other programs create and
// remove files there): what the walker prints of them is not compared.
var volatileDirs = map[string]bool{os.TempDir(): true, "/tmp": true, "/var/tmp": true, "/dev/shm": true}

// steady replaces the results of output lines about a volatile directory
// itself (its listing, nlink, times) by "(volatile)".
func (f *walkerFixture) steady(out string) string {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		head, _, ok := strings.Cut(l, ": ")
		if !ok {
			continue
		}
		for _, p := range strings.Fields(head)[1:] {
			// the walker's own /proc links, not this process's
			if rest, ok := strings.CutPrefix(p, "/proc/self/cwd"); ok {
				p = f.root + rest
			} else if rest, ok := strings.CutPrefix(p, "/proc/self/exe"); ok {
				p = f.bin + rest
			}
			if !filepath.IsAbs(p) {
				p = filepath.Join(f.root, p)
			}
			if r, err := filepath.EvalSymlinks(p); err == nil && volatileDirs[r] {
				lines[i] = head + ": (volatile)"
				break
			}
		}
	}
	return strings.Join(lines, "\n")
}

// walkerProbes are the realpath probes of the bug report and the cases written for
// each rule of docs/loader.md; they are also FuzzWalker's seeds.
var walkerProbes = []string{
	// the bug report's: system files outside the image, the run directory, DIR/link/../top.txt
	"rp\t/usr/lib/python3.11/json/__init__.py\nrp\t/usr/share/doc/bash/copyright\nrpn\t/usr/share/doc/bash/copyright\n" +
		"canon\t/usr/lib/python3.11/json/__init__.py\nrpchk\t/usr/share/doc/bash/copyright\n",
	"rp\tROOT/out/file\nrp\tout/file\nrp\tout/d/../file\ncanon\tout/d/e\nrp\tROOT/in/a/f\nrp\tin/a/sub/h\n",
	"rp\tROOT/in/deep/../deep/top.txt\nrp\tROOT/out/deep/b/lnk/../top.txt\nrp\tROOT/in/deep/lnk\nrp\tROOT/out/deep/b/c/k\n" +
		"rp\tROOT/out/deep/b/up/file\nrp\tROOT/out/deep/b/c/abs\n",
	"rp\tROOT/in/dir/../rel\nrp\tROOT/in/abs/back\nrp\tROOT/in/chain/h\nrp\tROOT/in/slash\nrp\tROOT/in/dots\nrp\tROOT/in/up/in/rel\n",
	// errors: ELOOP, ENOENT with the partial path, ENOTDIR, dangling, too long
	"rp\tROOT/in/loop1\nrp\tROOT/in/self/x\nrp\tROOT/in/dangling\nrp\tROOT/in/dangabs\nrp\tROOT/in/a/f/x\nrp\tROOT/in/a/f/..\n" +
		"rp\tROOT/in/filedir\nrp\tROOT/in/dotdotf\nrp\tROOT/in/nope/..\nrp\tROOT/in/a/f/\nrp\tROOT/out/loop\nrp\tROOT/out/nope/x\n",
	"rp\tROOT/in/" + strings.Repeat("n", 256) + "\nrp\tROOT/out/" + strings.Repeat("n", 256) + "\nrp\tROOT" + strings.Repeat("/.", 2100) + "\n" +
		"stat\tROOT/in/" + strings.Repeat("n", 256) + "\nrp\t\nstat\t\n",
	// relative, after chdir, through the root symlink and /
	"cd\tin/a\nrp\tf\nrp\t../rel\nrp\t../../out/in/f\nstat\t../dir/sub/h\nopen\t./sub/../f\ncd\t/\nrp\ttmp/..\nrp\t.\n",
	"rp\tROOT/in/root/tmp\nrp\tROOT/in/tmp/..\nrp\t/proc/self/cwd\nrp\t/proc/self/exe\nrp\t/\nrp\t//\n",
	// nobody: directories it cannot search, a file it cannot read
	"nobody\nrp\tROOT/in/locked/x\nrp\tROOT/in/locked/..\nrp\tROOT/in/locked\nrp\tROOT/in/lockedlnk\nstat\tROOT/in/locked/x\n" +
		"stat\tROOT/in/locked/.\nstat\tROOT/in/locked/\nopen\tROOT/in/a/secret\naccess\tROOT/in/locked/inner/y\t0\n" +
		"rp\tROOT/out/locked/z\nrp\tROOT/out/locked/../file\nopendir\tROOT/in/locked\nopendir\tROOT/in/locked/inner\n",
	"nobody\nmkdir\tROOT/in/a/__pycache__\nstat\tROOT/in/a/f\nmkdir\tROOT/in/w/new\nstat\tROOT/in/w/g\nmkdir\tROOT/in/ro/x\n",
	// writes that fail change nothing; writes that succeed are seen
	"nobody\nmkdir\t/usr\nmkdir\tROOT/out\nmkdir\tROOT/in\nmkdir\tROOT/in/a\nstat\tROOT/in/a/f\nmkdir\tROOT/in/a/f/x\nmkdir\tROOT/in/nope/x\nrp\tROOT/in/a/sub\n",
	"nobody\nmkdir\tROOT/in/w/new\nopendir\tROOT/in/w\nrp\tROOT/in/w/new\nmkdir\tROOT/in/w/g\n",
	// dirfd-relative
	"at\tROOT/in\ta/f\nat\tROOT/in\trel\nat\tROOT/in\tnope\nat\tROOT/in/a\t../out\nat\tROOT/out\tin/f\nat\tROOT/in/dir\tsub/../f\n",
	"statx\tROOT/in/rel\nreadlink\tROOT/in/rel\nreadlink\tROOT/in/a\nreadlink\tROOT/in/dir/\nlstat\tROOT/in/slash\nlstat\tROOT/in/slash/\n" +
		"opendir\tROOT/in\nopendir\tROOT/in/dir\nopendir\tROOT/out/deep/b\nfopen\tROOT/in/dir/f\naccess\tROOT/in/a/f\t7\n",
}

func TestWalkerProbes(t *testing.T) {
	f := newWalkerFixture(t)
	for _, p := range walkerProbes {
		block, nobody := walkerDecode([]byte("#"+p), f.root)
		f.check(t, block, nobody)
		if !nobody {
			f.check(t, block, true)
		}
	}
}

// TestWalkerRandom: 300 random blocks, the same every run (the fuzzer
// explores beyond them: make fuzz-walker).
func TestWalkerRandom(t *testing.T) {
	f := newWalkerFixture(t)
	rng := rand.New(rand.NewPCG(19, 1))
	for i := 0; i < 300; i++ {
		data := make([]byte, 8+rng.IntN(60))
		for k := range data {
			data[k] = byte(rng.Uint32())
		}
		if data[0] == '#' {
			data[0] = 0
		}
		block, nobody := walkerDecode(data, f.root)
		f.check(t, block, nobody)
	}
	t.Logf("%d blocks, %d lines of output compared", f.blocks, f.lines)
}

func FuzzWalker(f *testing.F) {
	for _, p := range walkerProbes {
		f.Add([]byte("#" + p))
	}
	f.Add([]byte{0, 0, 3, 3, 4, 1, 0})
	f.Add([]byte{1, 9, 0, 4, 1, 5, 3, 49, 0, 0})
	fx := newWalkerFixture(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		block, nobody := walkerDecode(data, fx.root)
		fx.check(t, block, nobody)
	})
}

// TestTclNormalize: the Tcl reproduction of the realpath bug: `file normalize` through a
// symlink calls libc's realpath; under the shim it gives the native answer.
func TestTclNormalize(t *testing.T) {
	tclsh, err := exec.LookPath("tclsh")
	if err != nil {
		t.Fatal("tclsh is needed (Debian tcl)")
	}
	_, tree, stage := writesTree(t, map[string]string{"d/sub/file.tcl": "puts x\n"})
	if err := os.Symlink("d/sub", filepath.Join(tree, "link")); err != nil {
		t.Fatal(err)
	}
	var entries []image.Entry
	for _, e := range treeimage.Entries(t, tree) {
		if e.Path == tree || strings.HasPrefix(e.Path, tree+"/") {
			entries = append(entries, e)
		}
	}
	two := filepath.Join(filepath.Dir(stage), "two")
	if err := os.Mkdir(two, 0o755); err != nil {
		t.Fatal(err)
	}
	stage = stageEntries(t, two, entries)
	script := "puts [file normalize " + tree + "/link/file.tcl]\nputs [file normalize " + tree + "/link/../d/./sub]\n" +
		"puts [file normalize /usr/share/doc/bash/copyright]\nputs [file normalize /lib/x86_64-linux-gnu/libc.so.6]\n"
	run := func(env []string) string {
		cmd := exec.Command(tclsh)
		cmd.Env, cmd.Stdin = env, strings.NewReader(script)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("tclsh: %v\n%s", err, out)
		}
		return string(out)
	}
	base := []string{"PATH=/usr/bin:/bin", "HOME=/", "LANG=C.UTF-8"}
	native := run(base)
	if want := tree + "/d/sub/file.tcl\n"; !strings.HasPrefix(native, want) {
		t.Fatalf("natively: %q, want it to start with %q", native, want)
	}
	if shim := run(ShimEnv(stage, base, EnvOptions{})); shim != native {
		t.Errorf("tclsh under the shim:\n%s\nnatively:\n%s", shim, native)
	}
}

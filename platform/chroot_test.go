package platform

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/clitest"
)

// chrootSpec is one chroot of mk/chroot.sh and how to build for it.
type chrootSpec struct {
	name   string // mk/chroot.sh's name
	goarch string // the dlbundle that runs the app there (exec, stage)
	cc     string // the host's cross compiler for its C app; "": the chroot's gcc
	ldso   string // its ld.so (PT_INTERP)
}

var chroots = []chrootSpec{
	{"bookworm-arm64", "arm64", "aarch64-linux-gnu-gcc", "/lib/ld-linux-aarch64.so.1"},
	{"bullseye-amd64", "amd64", "", "/lib64/ld-linux-x86-64.so.2"},
	{"trixie-amd64", "amd64", "", "/lib64/ld-linux-x86-64.so.2"},
}

// chrootRoot is where make deps keeps the chroots (mk/chroot.sh).
func chrootRoot() string {
	if d := os.Getenv("DLBUNDLE_CHROOTS"); d != "" {
		return d
	}
	return "/var/cache/dlbundle/chroots"
}

// TestPlatforms: in each chroot, as a site would on such a node, the
// x86-64 dlbundle traces the app (natively, or the arm64 app under
// qemu-user: the end-to-end pilot, since a guest cannot ptrace a guest) and
// builds the image; the dlbundle of the chroot's architecture stages it
// cold and quietly (no ld.so message: glibc 2.31 has no ld.so --help; no
// "cannot be preloaded": the shim is of this architecture) and runs the app
// with the output it has natively; a warm exec then makes no system call on
// a path the image bundles (strace of the whole chroot: qemu passes the
// guest's paths through).
//
// Apps: Debian's python3 importing numpy, and the demo C app (10 libraries
// through RUNPATH $ORIGIN, two plugins opened with dlopen by name) compiled
// on the host against the chroot's libc (gcc or gcc-aarch64-linux-gnu with
// --sysroot).
func TestPlatforms(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("the chroots are prepared for an x86-64 host") // make test on an arm64 node runs the rest natively
	}
	if os.Getuid() != 0 {
		t.Skip("needs root (chroot, mount namespaces); make test runs as root")
	}
	for _, tool := range []string{"unshare", "strace", "/usr/bin/mount", "/usr/sbin/chroot"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed (make deps installs it): %v", tool, err)
		}
	}
	for _, c := range chroots {
		t.Run(c.name, func(t *testing.T) {
			root := filepath.Join(chrootRoot(), c.name)
			if _, err := os.Stat(filepath.Join(root, "usr/bin/python3")); err != nil {
				t.Skipf("chroot %s absent (%v): `make deps` prepares it (mk/chroot.sh %s)", c.name, err, c.name)
			}
			if c.goarch != "amd64" {
				if _, err := os.Stat("/proc/sys/fs/binfmt_misc/qemu-aarch64"); err != nil {
					t.Fatalf("qemu-aarch64 is not registered with binfmt_misc (%v): `make deps` registers it", err)
				}
			}
			if c.cc != "" {
				if _, err := exec.LookPath(c.cc); err != nil {
					t.Fatalf("%s is needed (make deps installs it): %v", c.cc, err)
				}
			} else if _, err := os.Stat(filepath.Join(root, "usr/bin/gcc")); err != nil {
				t.Fatalf("chroot %s has no gcc (%v): prepared by an older mk/chroot.sh; `make deps` renews it", c.name, err)
			}
			ch := newChroot(t, c, root)
			t.Run("python-numpy", func(t *testing.T) {
				ch.check(t, "numpy", []string{"/usr/bin/python3", "-c",
					"import numpy, sys; print(numpy.arange(10).sum(), numpy.__version__, sys.version_info[:2])"}, nil)
			})
			t.Run("c-runpath-dlopen", func(t *testing.T) {
				app := ch.demoApp(t)
				ch.check(t, "capp", []string{app}, nil)
			})
			if c.goarch != "amd64" {
				t.Run("foreign-image", ch.foreignImage)
			}
		})
	}
}

// chroot is one prepared chroot with a private work directory in its /tmp
// (removed at the end) holding both dlbundle binaries.
type chroot struct {
	chrootSpec
	root string // the chroot on the host
	work string // the work directory, as seen inside the chroot
	host string // the same on the host
	env  []string
}

func newChroot(t *testing.T, c chrootSpec, root string) *chroot {
	var b [6]byte
	rand.Read(b[:])
	work := "/tmp/dlbundle-platform-" + hex.EncodeToString(b[:])
	ch := &chroot{chrootSpec: c, root: root, work: work, host: filepath.Join(root, work),
		env: []string{"PATH=/usr/bin:/bin", "HOME=" + work, "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1"}}
	if err := os.MkdirAll(ch.host, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(ch.host) })
	for _, arch := range []string{"amd64", c.goarch} {
		data, err := os.ReadFile(dlbundleFor(t, arch))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ch.host, "dlbundle-"+arch), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return ch
}

// run runs argv in the chroot, with /proc mounted in a mount namespace of
// its own (nothing is mounted on the host's copy, which other test runs may
// share); strace, when not "", is a log to trace the whole run into (-f:
// the emulator too).
func (ch *chroot) run(t *testing.T, strace string, argv ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmdline := append([]string{"unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
		`/usr/bin/mount -t proc proc "$0/proc" && cd "$0" && exec /usr/sbin/chroot "$0" "$@"`, ch.root}, argv...)
	if strace != "" {
		cmdline = append([]string{"strace", "-f", "-qq", "-s", "4096", "-e", "trace=%file,getdents64", "-o", strace}, cmdline...)
	}
	cmd := exec.Command(cmdline[0], cmdline[1:]...)
	cmd.Env = ch.env
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

func (ch *chroot) must(t *testing.T, argv ...string) string {
	t.Helper()
	out, errOut, err := ch.run(t, "", argv...)
	if err != nil {
		t.Fatalf("%s: %v\n%s%s", strings.Join(argv, " "), err, out, errOut)
	}
	return out
}

// demoApp compiles the demo app (examples/demo/make-fixture.sh) against the
// chroot's libc into /opt/<work>/ and returns its path: with the chroot's
// gcc, or the host's cross compiler (whose libc is the chroot's Debian's).
func (ch *chroot) demoApp(t *testing.T) string {
	dir := "/opt/" + filepath.Base(ch.work)
	t.Cleanup(func() { os.RemoveAll(filepath.Join(ch.root, dir)) })
	gen, err := os.ReadFile("../examples/demo/make-fixture.sh")
	if err != nil {
		t.Fatal(err)
	}
	if ch.cc == "" {
		if err := os.WriteFile(filepath.Join(ch.host, "make-fixture.sh"), gen, 0o755); err != nil {
			t.Fatal(err)
		}
		ch.must(t, "/bin/sh", ch.work+"/make-fixture.sh", dir, "10")
	} else {
		cmd := exec.Command("sh", "-s", filepath.Join(ch.root, dir), "10")
		cmd.Stdin = bytes.NewReader(gen)
		cmd.Env = append(os.Environ(), "CC="+ch.cc)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make-fixture.sh with %s: %v\n%s", ch.cc, err, out)
		}
	}
	return dir + "/bin/demo-app"
}

// foreignImage: exec of an x86-64 image (the x86-64 dlbundle binary itself,
// traced and bundled) by the chroot's dlbundle of another architecture is
// refused with the stager's message, not ld.so's noise, and runs nothing.
// The image says its architecture ((*image.Image).Arch).
func (ch *chroot) foreignImage(t *testing.T) {
	tr, img := ch.work+"/foreign.trace", ch.work+"/foreign.dlimg"
	self := ch.work + "/dlbundle-amd64"
	ch.must(t, self, "trace", "-q", "-o", tr, "--", self, "--version")
	ch.must(t, self, "build", "-o", img, "--include", ch.work, tr)
	out, errOut, err := ch.run(t, "", ch.work+"/dlbundle-"+ch.goarch, "exec", "--stage-dir", ch.work+"/stage-foreign", img, "--", self, "--version")
	if err == nil || out != "" {
		t.Fatalf("exec of an x86-64 image on %s: %v, stdout %q", ch.goarch, err, out)
	}
	if !strings.Contains(errOut, "image is for") || ldsoNoise.MatchString(strings.ReplaceAll(errOut, "image is for", "")) {
		t.Errorf("stderr does not say the architecture, or has ld.so noise:\n%s", errOut)
	}
}

// ldsoNoise is what ld.so or the stager print when the shim or the search
// rules do not work on a platform.
var ldsoNoise = regexp.MustCompile(`ld\.so|cannot be preloaded|audit interface|wrong ELF class|search rules|ERROR`)

// check runs the whole round for one app (see TestPlatforms).
// recordLine is the preload's debug line on where its real functions came from.
var recordLine = regexp.MustCompile(`real functions: (\d+) from the stage's record, \d+ by dlsym`)

func (ch *chroot) check(t *testing.T, name string, argv []string, include []string) {
	native := ch.must(t, argv...)
	if native == "" {
		t.Fatalf("%v printed nothing natively", argv)
	}
	tr, img := ch.work+"/"+name+".trace", ch.work+"/"+name+".dlimg"
	ch.must(t, append([]string{ch.work + "/dlbundle-amd64", "trace", "-q", "-o", tr, "--"}, argv...)...)
	build := []string{ch.work + "/dlbundle-amd64", "build", "-o", img}
	for _, p := range include {
		build = append(build, "--include", p)
	}
	ch.must(t, append(build, tr)...)
	bundled := bundledPaths(t, filepath.Join(ch.root, img))

	stageDir := ch.work + "/stage-" + name
	execArgv := append([]string{ch.work + "/dlbundle-" + ch.goarch, "exec", "--stage-dir", stageDir, img, "--"}, argv...)
	out, errOut, err := ch.run(t, "", execArgv...)
	if err != nil || out != native {
		t.Fatalf("cold exec: %v\nstdout %q, natively %q\nstderr:\n%s", err, out, native, errOut)
	}
	if l := ldsoNoise.FindString(errOut); l != "" {
		t.Errorf("cold exec is not quiet (%q):\n%s", l, errOut)
	}
	rules, _ := filepath.Glob(filepath.Join(ch.root, stageDir, "sha256-*", "search"))
	if len(rules) != 1 {
		t.Errorf("the stage has no ld.so search rules (STAGE/search)")
	}
	log := filepath.Join(ch.host, name+".strace")
	out, errOut, err = ch.run(t, log, execArgv...)
	if err != nil || out != native || ldsoNoise.MatchString(errOut) {
		t.Fatalf("warm exec: %v\nstdout %q, natively %q\nstderr:\n%s", err, out, native, errOut)
	}
	// The preload takes the real functions from the stage's record of this
	// libc (loader/stagefmt/reals.go) on every platform, not by dlsym.
	_, errOut, err = ch.run(t, "", append([]string{"/usr/bin/env", "DLBUNDLE_DEBUG=1"}, execArgv...)...)
	if m := recordLine.FindStringSubmatch(errOut); err != nil || m == nil || m[1] == "0" {
		t.Errorf("warm exec with DLBUNDLE_DEBUG=1 (%v): no real functions from the stage's record; the line: %q", err, m)
	}
	lc := leakCheck{links: imageLinks(t, filepath.Join(ch.root, img))}
	if ch.goarch != runtime.GOARCH {
		lc.emulatorInterp = ch.ldso
	}
	n, report := leaksIn(t, log, bundled, execArgv[0], lc)
	if n != 0 {
		t.Errorf("a warm exec made %d system calls on paths the image bundles:\n%s", n, strings.Join(report, "\n"))
	}
	// The check must be able to fail: natively the app looks them up.
	ch.run(t, log+".native", argv...)
	if nNative, _ := leaks(t, log+".native", bundled, argv[0]); nNative == 0 {
		t.Fatalf("natively %v made no call on its %d bundled paths: the check is broken", argv, len(bundled))
	} else {
		t.Logf("%d bundled paths; system calls on them: native %d, warm exec %d", len(bundled), nNative, n)
	}
}

// bundledPaths are the image's bundled regular files, directories and
// symlinks (what exec must serve from the stage).
func bundledPaths(t *testing.T, img string) map[string]bool {
	im, err := image.OpenFile(img)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	m := map[string]bool{}
	for _, e := range im.Entries() {
		switch e.Type {
		case image.TypeRegular, image.TypeDir, image.TypeSymlink:
			m[e.Path] = true
		}
	}
	return m
}

var straceLine = regexp.MustCompile(`^(\d+) +([a-z0-9_]+)\((.*)`)
var straceString = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`)

// glibcInternal are files glibc opens with its internal open, out of a
// preload's reach (docs/loader.md): locale data, gconv, locale.alias.
var glibcInternal = regexp.MustCompile(`^/usr/lib/locale/|/gconv/|/locale\.alias$`)

// leaks counts the system calls in an strace log whose first path argument
// is a bundled path, from the execve of prog (before it: unshare, mount and
// chroot of the wrapper), and describes them. Relative paths are taken in
// "/" (the chroot's working directory); getcwd's string is its answer, not
// a lookup. Under qemu-user the emulator's own calls are in the log: its
// prefix probes (/etc/qemu-binfmt/...) name no bundled path.
func leaks(t *testing.T, log string, bundled map[string]bool, prog string) (n int, report []string) {
	return leaksIn(t, log, bundled, prog, leakCheck{})
}

// leaksIn is leaks with the checks of c (see leakCheck).
func leaksIn(t *testing.T, log string, bundled map[string]bool, prog string, c leakCheck) (n int, report []string) {
	f, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	per := map[string][]string{}
	started := false
	nodePid := map[string]bool{} // processes running a program of c.nodeExec
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := straceLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		pid, call, args := m[1], m[2], m[3]
		if !started {
			started = call == "execve" && strings.HasPrefix(args, strconv.Quote(prog)+",")
			continue
		}
		if call == "execve" {
			s := straceString.FindStringSubmatch(args)
			nodePid[pid] = s != nil && c.nodeExec[s[1]]
		}
		if nodePid[pid] || call == "getdents64" || call == "getcwd" {
			continue
		}
		s := straceString.FindStringSubmatch(args)
		if s == nil || s[1] == "" {
			continue
		}
		p := s[1]
		if !strings.HasPrefix(p, "/") {
			p = filepath.Join("/", p)
		}
		p = filepath.Clean(p)
		if p == c.emulatorInterp {
			continue
		}
		if c.links != nil {
			p = resolveIn(c.links, p)
		}
		if bundled[p] && !glibcInternal.MatchString(p) {
			key := p
			if key != filepath.Clean(s[1]) {
				key = s[1] + " (" + p + ")"
			}
			per[key] = append(per[key], sc.Text())
		}
	}
	if !started {
		t.Fatalf("%s: no execve of %s", log, prog)
	}
	for p, lines := range per {
		n += len(lines)
		report = append(report, fmt.Sprintf("%4d  %s\n        e.g. %s", len(lines), p, lines[0]))
	}
	sort.Strings(report)
	return n, report
}

// dlbundleFor is the dlbundle CLI for linux/goarch, built once per test binary.
func dlbundleFor(t *testing.T, goarch string) string { return clitest.CLIFor(t, goarch) }

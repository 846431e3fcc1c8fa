package loader

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/treeimage"
)

// privFixture is a stage holding python3 and three copies of privprobe:
// plain, setuid uid 1001 and setgid gid 1001; the stage and its parents are
// world-readable so that uid 1002 can run from it.
type privFixture struct {
	root, bin, stage string
	progs            []string // plain, suid, sgid
}

func newPrivFixture(t *testing.T) *privFixture {
	t.Helper()
	if os.Getuid() != 0 {
		t.Fatal("runs as root (it makes setuid files and runs as uid 1002)")
	}
	root := t.TempDir()
	for d := root; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(root, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	f := &privFixture{root: root, bin: bin}
	for _, name := range []string{"plain", "suid", "sgid"} {
		p := filepath.Join(bin, name)
		if out, err := exec.Command("gcc", "-O1", "-o", p, "testdata/privprobe.c").CombinedOutput(); err != nil {
			t.Fatalf("gcc privprobe.c: %v\n%s", err, out)
		}
		f.progs = append(f.progs, p)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chown(f.progs[1], 1001, 1001))
	must(syscall.Chmod(f.progs[1], 0o4755))
	must(os.Chown(f.progs[2], 0, 1001))
	must(syscall.Chmod(f.progs[2], 0o2755))
	var entries []image.Entry
	for _, e := range treeimage.Entries(t, "/usr/bin/python3", "/usr/bin/python3.11", bin) {
		if e.Path == "/usr/bin/python3" || e.Path == "/usr/bin/python3.11" || strings.HasPrefix(e.Path, root) {
			entries = append(entries, e)
		}
	}
	f.stage = stageEntries(t, root, entries)
	// Directories the image does not list (the parents of python3) are
	// made private; uid 1002 runs from this stage.
	must(filepath.WalkDir(f.stage, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			err = os.Chmod(p, 0o755)
		}
		return err
	}))
	for _, p := range append([]string{"/usr/bin/python3"}, f.progs...) {
		if _, ok := StagedPath(f.stage, p); !ok {
			t.Fatalf("%s is not bundled", p)
		}
	}
	return f
}

// runAsUID runs argv (from exe when not "") as uid with env; stdout and
// stderr apart.
func runAsUID(t *testing.T, uid uint32, exe string, argv, env []string) (string, string) {
	t.Helper()
	if exe == "" {
		exe = argv[0]
	}
	cmd := exec.Command(exe)
	cmd.Args = argv
	cmd.Env, cmd.Dir = env, "/"
	if uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
	}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %v\n%s%s", argv, err, o.String(), e.String())
	}
	return o.String(), e.String()
}

// Regression: a setuid program bundled by the pilot ran as its staged copy,
// which extraction makes non-setuid (`passwd -S victim` printed P under
// exec, L natively); setgid was lost the same way.
// Exec'd by an app under the shim (execve, posix_spawn, posix_spawnp), as
// uid 1002, each privileged program runs from its original, without the
// shim's variables, with the ids it has natively; the plain one still runs
// from the stage. The shim decides from the mode the image recorded, with
// no operation on the original (file capabilities are not recorded: not
// covered).
func TestPrivilegedProgramsRunFromTheirOriginals(t *testing.T) {
	f := newPrivFixture(t)
	code := `import os, subprocess, sys
for p in sys.argv[1:]:
    print('execve', subprocess.run([p], capture_output=True, text=True).stdout, end='')
    r, w = os.pipe()
    pid = os.posix_spawn(p, [p], os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, w, 1)])
    os.close(w); print('posix_spawn', os.read(r, 4096).decode(), end=''); os.waitpid(pid, 0); os.close(r)
    r, w = os.pipe()
    pid = os.posix_spawnp(os.path.basename(p), [p], os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, w, 1)])
    os.close(w); print('posix_spawnp', os.read(r, 4096).decode(), end=''); os.waitpid(pid, 0); os.close(r)
`
	argv := append([]string{"/usr/bin/python3", "-I", "-c", code}, f.progs...)
	base := []string{"PATH=" + f.bin + ":/usr/bin:/bin", "HOME=/", "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1"}
	line := func(how, ids string, caps, shim int) string {
		return how + " " + ids + " caps=" + string(rune('0'+caps)) + " shimvars=" + string(rune('0'+shim)) + "\n"
	}
	want := func(plainShim int) string {
		var b strings.Builder
		for _, p := range []struct {
			ids        string
			caps, shim int
		}{{"euid=1002 egid=1002", 0, plainShim}, {"euid=1001 egid=1002", 0, 0}, {"euid=1002 egid=1001", 0, 0}} {
			for _, how := range []string{"execve", "posix_spawn", "posix_spawnp"} {
				b.WriteString(line(how, p.ids, p.caps, p.shim))
			}
		}
		return b.String()
	}
	native, _ := runAsUID(t, 1002, "", argv, base)
	if native != want(0) {
		t.Fatalf("natively:\n%s\nwant:\n%s", native, want(0))
	}
	staged, _ := StagedPath(f.stage, "/usr/bin/python3")
	shim, stderr := runAsUID(t, 1002, staged, argv, ShimEnv(f.stage, base, EnvOptions{}))
	if shim != want(1) {
		t.Errorf("under the shim:\n%s\nwant (as natively; only the plain program keeps the shim):\n%s\nstderr:\n%s", shim, want(1), stderr)
	}
}

// Regression: a child that changes its ids but keeps capabilities
// (setpriv --reuid, which sets PR_SET_KEEPCAPS) passed the shim's
// readability check on its CAP_DAC_* and got the shim's variables; the
// program it exec'd, as uid 1002 without capabilities, then could not load
// them from root's 0700 stage. It runs natively, as without dlbundle.
func TestCapabilityKeepingChildRunsNatively(t *testing.T) {
	f := newPrivFixture(t)
	if err := os.Chmod(f.stage, 0o700); err != nil {
		t.Fatal(err)
	}
	code := `import subprocess
r = subprocess.run(['/usr/bin/setpriv', '--reuid=1002', '--regid=1002', '--clear-groups', '--', '` + f.progs[0] + `'], capture_output=True, text=True)
print(r.returncode, r.stdout.strip(), repr(r.stderr))
`
	argv := []string{"/usr/bin/python3", "-I", "-c", code}
	base := []string{"PATH=/usr/bin:/bin", "HOME=/", "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1"}
	want := "0 euid=1002 egid=1002 caps=0 shimvars=0 ''\n"
	if native, _ := runAsUID(t, 0, "", argv, base); native != want {
		t.Fatalf("natively: %q, want %q", native, want)
	}
	staged, _ := StagedPath(f.stage, "/usr/bin/python3")
	if shim, stderr := runAsUID(t, 0, staged, argv, ShimEnv(f.stage, base, EnvOptions{})); shim != want {
		t.Errorf("under the shim: %q, want %q (as natively)\nstderr:\n%s", shim, want, stderr)
	}
}

// Regression: `dlbundle exec IMG -- passwd -S victim` ran the staged,
// non-setuid copy of passwd (P instead of L). exec's own start of a
// bundled setuid or setgid command runs its original, with the caller's
// environment (no shim variables); a plain command still runs staged.
func TestStartRunsPrivilegedCommandFromOriginal(t *testing.T) {
	f := newPrivFixture(t)
	base := []string{"PATH=" + f.bin + ":/usr/bin:/bin", "HOME=/"}
	for i, want := range []string{"euid=1002 egid=1002 caps=0 shimvars=1\n", "euid=1001 egid=1002 caps=0 shimvars=0\n", "euid=1002 egid=1001 caps=0 shimvars=0\n"} {
		name := filepath.Base(f.progs[i])
		p, err := Start(f.stage, []string{name}, base, EnvOptions{})
		if err != nil {
			t.Fatal(err)
		}
		staged, _ := StagedPath(f.stage, f.progs[i])
		if wantPath := map[bool]string{true: staged, false: f.progs[i]}[i == 0]; p.Path != wantPath {
			t.Errorf("Start(%s).Path = %s, want %s", name, p.Path, wantPath)
		}
		if got, _ := runAsUID(t, 1002, p.Path, p.Argv, p.Env); got != want {
			t.Errorf("%s as uid 1002 under exec: %q, want %q", name, got, want)
		}
	}
}

package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/image/registry"
	"github.com/dlbundle/dlbundle/image/registry/registrytest"
	"github.com/dlbundle/dlbundle/internal/clitest"
)

// Root parses nothing: a Prolog's `dlbundle stage --user` (root, staging
// uid 1002's image) makes the stage uid 1002's own `dlbundle stage` makes:
// the same files, modes, contents and owners, the lock and the alias
// included.
func TestStageForUserMatchesUsersOwnStage(t *testing.T) {
	needRoot(t)
	p := clitest.NewProbeImage(t)
	makePublic(t, p.Work)
	top := publicDir(t)
	cli := publicCLI(t, top)
	home := userDir(t, top, "home", victimUID)
	env := clitest.CleanEnv(home)
	byUser := filepath.Join(home, "by-user")
	byRoot := filepath.Join(home, "by-root")
	if out, code := runAs(t, victimUID, env, cli, "stage", "--stage-dir", byUser, p.Image); code != 0 {
		t.Fatalf("stage as uid 1002: %s", out)
	}
	out, code := runAs(t, 0, env, cli, "stage", "--user", "1002:1002", "--stage-dir", byRoot, p.Image)
	if code != 0 || !strings.HasPrefix(out, "staged ") {
		t.Fatalf("stage --user as root: exit %d: %s", code, out)
	}
	a, b := stageListing(t, byUser), stageListing(t, byRoot)
	if a != b {
		t.Fatalf("the stage root made for uid 1002 differs from uid 1002's own:\n%s", lineDiffs(a, b))
	}
	if !strings.Contains(a, "sha256-") || !strings.Contains(a, "uid=1002") {
		t.Fatalf("the listing holds no stage of uid 1002's:\n%s", a)
	}
	if strings.Contains(b, "uid=0 ") {
		t.Fatalf("root left a file of its own in uid 1002's stage dir:\n%s", b)
	}
	// The user's ranks use the stage root made (the alias) and can take
	// the lock root created.
	out, code = runAs(t, victimUID, env, cli, "stage", "--stage-dir", byRoot, p.Image)
	if code != 0 || !strings.HasPrefix(out, "already staged ") {
		t.Fatalf("uid 1002 after root's stage --user: exit %d: %s", code, out)
	}
	out, code = runAs(t, victimUID, env, cli, "exec", "--stage-dir", byRoot, p.Image, "--", p.Original)
	if code != 0 {
		t.Fatalf("uid 1002's exec from root's stage: exit %d: %s", code, out)
	}
}

// The parsing child runs as the job's user, with no_new_privs, without
// capabilities or root's groups, with a clean environment and only the
// image and the stage dir open; SIGCONT lets it finish and root publishes.
func TestStageForChildRunsAsUserWithNoNewPrivs(t *testing.T) {
	needRoot(t)
	img, top, cli := slowImage(t)
	stage := filepath.Join(userDir(t, top, "home", victimUID), "stage")
	root, child := startStageFor(t, cli, stage, img)
	status := procFile(t, child, "status")
	for _, want := range []string{"Uid:\t1002\t1002\t1002\t1002", "Gid:\t1002\t1002\t1002\t1002", "NoNewPrivs:\t1", "CapEff:\t0000000000000000", "CapPrm:\t0000000000000000"} {
		if !strings.Contains(status, want+"\n") {
			t.Errorf("the parsing child's status lacks %q:\n%s", want, status)
		}
	}
	if groups := strings.Fields(strings.TrimPrefix(grepLine(status, "Groups:"), "Groups:")); len(groups) != 0 {
		t.Errorf("the parsing child kept supplementary groups:\n%s", grepLine(status, "Groups:"))
	}
	environ := strings.Split(strings.TrimRight(procFile(t, child, "environ"), "\x00"), "\x00")
	sort.Strings(environ)
	if strings.Join(environ, " ") != "LC_ALL=C PATH=/usr/sbin:/usr/bin:/sbin:/bin" {
		t.Errorf("the parsing child's environment is not the clean one: %q", environ)
	}
	if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/3", child)); err != nil || l != img {
		t.Errorf("fd 3 of the child is %q (%v), want the image %s", l, err, img)
	}
	syscall.Kill(child, syscall.SIGCONT)
	out, code := root.wait(t)
	if code != 0 || !strings.HasPrefix(out, "staged ") {
		t.Fatalf("stage --user: exit %d: %s", code, out)
	}
	if got := stageNames(t, stage, "sha256-"); len(got) != 1 {
		t.Fatalf("published stages: %v", got)
	}
}

// A parser that crashes (the child killed by a signal, as a decoder bug
// would) or hangs (stopped, then root's SIGTERM, as a Prolog's timeout)
// leaves nothing half-staged: no stage, no temporary directory; root says
// what happened to the child and fails.
func TestStageForCrashedOrHungChildLeavesNothing(t *testing.T) {
	needRoot(t)
	img, top, cli := slowImage(t)
	home := userDir(t, top, "home", victimUID)
	for _, c := range []struct {
		name string
		do   func(root *rootStage, child int)
		want string
	}{
		{"crash", func(_ *rootStage, child int) { syscall.Kill(child, syscall.SIGKILL) }, "was killed by signal 9"},
		{"hang", func(root *rootStage, child int) { root.cmd.Process.Signal(syscall.SIGTERM) }, "context canceled"},
	} {
		t.Run(c.name, func(t *testing.T) {
			stage := filepath.Join(home, c.name)
			root, child := startStageFor(t, cli, stage, img)
			c.do(root, child)
			start := time.Now()
			out, code := root.wait(t)
			if code == 0 || !strings.Contains(out, c.want) {
				t.Fatalf("root: exit %d, want a failure saying %q: %s", code, c.want, out)
			}
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("root took %v to give up", d)
			}
			if syscall.Kill(child, 0) == nil && procState(child) != "Z" {
				t.Errorf("the child %d outlived root", child)
			}
			if left := append(stageNames(t, stage, "sha256-"), stageNames(t, stage, "tmp.")...); len(left) != 0 {
				t.Fatalf("half-staged: %v left in %s; root said: %s", left, stage, out)
			}
		})
	}
}

// A caller that is not root parses as itself, as before: no child.
// `--user` naming another uid is refused; naming the caller is the
// caller's own stage. As a check that strace sees the child at all,
// root's stage --user under strace shows it.
func TestStageAsUserForksNoChild(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("strace"); err != nil {
		t.Fatal("strace is needed (make deps installs it)")
	}
	p := clitest.NewProbeImage(t)
	makePublic(t, p.Work)
	top := publicDir(t)
	cli := publicCLI(t, top)
	home := userDir(t, top, "home", victimUID)
	env := clitest.CleanEnv(home)
	traced := func(uid uint32, log string, args ...string) string {
		out, code := runAs(t, uid, env, append([]string{"/usr/bin/strace", "-f", "-qq", "-e", "trace=execve", "-o", log, cli}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, out)
		}
		b, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, args := range [][]string{
		{"stage", "--stage-dir", filepath.Join(home, "own"), p.Image},
		{"stage", "--user", "1002:1002", "--stage-dir", filepath.Join(home, "self"), p.Image},
	} {
		log := traced(victimUID, filepath.Join(home, "strace.log"), args...)
		if strings.Contains(log, StageChildVerb) {
			t.Errorf("uid 1002's %v forked a parsing child:\n%s", args, grepLine(log, StageChildVerb))
		}
	}
	out, code := runAs(t, victimUID, env, cli, "stage", "--user", "1001:1001", "--stage-dir", filepath.Join(home, "other"), p.Image)
	if code != 2 || !strings.Contains(out, "only root stages for another user") {
		t.Errorf("uid 1002's stage --user 1001: exit %d: %s", code, out)
	}
	log := traced(0, filepath.Join(t.TempDir(), "root.log"), "stage", "--user", "1002:1002", "--stage-dir", filepath.Join(home, "root"), p.Image)
	if !strings.Contains(log, StageChildVerb) {
		t.Fatalf("strace saw no parsing child in root's stage --user:\n%s", log)
	}
}

// userDir is dir/name, a directory of uid's (mode 0755).
func userDir(t *testing.T, dir, name string, uid int) string {
	t.Helper()
	d := filepath.Join(dir, name)
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(d, uid, uid); err != nil {
		t.Fatal(err)
	}
	return d
}

// stageListing describes every file below dir: path, type, mode, owner,
// size, link target and content digest, one line each.
func stageListing(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		line := fmt.Sprintf("%s mode=%o uid=%d gid=%d", rel, st.Mode, st.Uid, st.Gid)
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			line += fmt.Sprintf(" size=%d sha256=%s", st.Size, hex.EncodeToString(sum[:8]))
		case syscall.S_IFLNK:
			l, _ := os.Readlink(p)
			line += " -> " + l
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

func lineDiffs(a, b string) string {
	in := map[string]bool{}
	for _, l := range strings.Split(a, "\n") {
		in[l] = true
	}
	var s []string
	for _, l := range strings.Split(b, "\n") {
		if !in[l] {
			s = append(s, "root's only: "+l)
		}
		delete(in, l)
	}
	for l := range in {
		s = append(s, "user's only: "+l)
	}
	sort.Strings(s)
	return strings.Join(s, "\n")
}

// slowImage writes an image whose decoding takes long enough for a test to
// catch the parsing child (64 MiB of one file), readable by every user.
func slowImage(t *testing.T) (img, top, cli string) {
	t.Helper()
	top = publicDir(t)
	cli = publicCLI(t, top)
	src := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(src, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	const size = 64 << 20
	if err := os.Truncate(src, size); err != nil {
		t.Fatal(err)
	}
	img = filepath.Join(top, "slow.dlimg")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := image.Write(f, []image.Entry{{Path: "/opt/dlbundle-privsep-test/big.dat", Type: image.TypeRegular, Mode: 0o100644,
		Size: size, SourcePath: src}}, image.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(img, 0o644); err != nil {
		t.Fatal(err)
	}
	return img, top, cli
}

type rootStage struct {
	cmd      *exec.Cmd
	out      strings.Builder
	finished bool
}

func (r *rootStage) wait(t *testing.T) (string, int) {
	t.Helper()
	if !r.finished {
		r.cmd.Wait()
		r.finished = true
	}
	return r.out.String(), r.cmd.ProcessState.ExitCode()
}

// startStageFor starts root's `stage --user 1002` of img into stage and
// returns it with its parsing child, caught and stopped (SIGSTOP).
func startStageFor(t *testing.T, cli, stage, img string) (*rootStage, int) {
	t.Helper()
	r := &rootStage{cmd: exec.Command(cli, "stage", "--user", "1002:1002", "--workers", "1", "--stage-dir", stage, img)}
	r.cmd.Env = clitest.CleanEnv(t.TempDir())
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.cmd.Process.Kill(); r.wait(t) })
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if child := stageChildOf(r.cmd.Process.Pid); child != 0 {
			if err := syscall.Kill(child, syscall.SIGSTOP); err == nil {
				waitStopped(t, child)
				return r, child
			}
		}
		if r.cmd.ProcessState != nil {
			break
		}
		time.Sleep(500 * time.Microsecond)
	}
	r.cmd.Process.Kill()
	out, _ := r.wait(t)
	t.Fatalf("no parsing child of root's stage --user was seen: %s", out)
	return nil, 0
}

// stageChildOf is the pid of the __stage-child process pid started, or 0.
func stageChildOf(pid int) int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, task := range tasks {
		b, _ := os.ReadFile(task)
		for _, f := range strings.Fields(string(b)) {
			c, _ := strconv.Atoi(f)
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", c))
			if strings.Contains(string(cmdline), "\x00"+StageChildVerb+"\x00") && !strings.Contains(string(cmdline), "--remove") {
				return c
			}
		}
	}
	return 0
}

func waitStopped(t *testing.T, pid int) {
	t.Helper()
	for i := 0; i < 2000 && procState(pid) != "T"; i++ {
		time.Sleep(time.Millisecond)
	}
	if s := procState(pid); s != "T" {
		t.Fatalf("child %d did not stop (state %q)", pid, s)
	}
}

func procState(pid int) string {
	return strings.TrimSpace(strings.Fields(grepLine(readProc(pid, "status"), "State:") + " ? ?")[1])
}

func readProc(pid int, name string) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, name))
	return string(b)
}

func procFile(t *testing.T, pid int, name string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func grepLine(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

func stageNames(t *testing.T, dir, prefix string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			names = append(names, e.Name())
		}
	}
	return names
}

// An oci:// image staged by root for uid 1002: the manifest and the blob
// are read by the child as uid 1002 (root has no file to open); the stage
// is uid 1002's, with nothing of root's in the stage dir, and uid 1002's
// exec in the same job finds it.
func TestStageForOCIIsFetchedByTheUser(t *testing.T) {
	needRoot(t)
	addr, _ := registrytest.StartDistribution(t)
	p := clitest.NewProbeImage(t)
	ref := "oci://" + addr + "/apps/privsep:v1"
	if _, err := registry.Push(context.Background(), p.Image, ref, registry.Options{}); err != nil {
		t.Fatal(err)
	}
	top := publicDir(t)
	cli := publicCLI(t, top)
	home := userDir(t, top, "home", victimUID)
	env := append(clitest.CleanEnv(home), "SLURM_JOB_ID=94")
	stage := filepath.Join(home, "stage")
	out, code := runAs(t, 0, env, cli, "stage", "--user", "1002:1002", "--insecure", "--stage-dir", stage, ref)
	if code != 0 || !strings.HasPrefix(out, "staged ") {
		t.Fatalf("stage --user of %s: exit %d: %s", ref, code, out)
	}
	listing := stageListing(t, stage)
	if !strings.Contains(listing, "sha256-") || strings.Contains(listing, "uid=0 ") {
		t.Fatalf("root's stage of %s for uid 1002:\n%s", ref, listing)
	}
	out, code = runAs(t, victimUID, env, cli, "exec", "--insecure", "--stage-dir", stage, ref, "--", p.Original)
	if code != 0 || clitest.Field(out, "argv0") != p.Original {
		t.Fatalf("uid 1002's exec of %s after root's stage: exit %d: %s", ref, code, out)
	}
}

// The table of privileged requests in the code is the one docs/security.md
// shows: each request of privilegedOps is a row of the table under "Root
// parses nothing", and the table has no other rows.
func TestPrivilegedOpsDocumented(t *testing.T) {
	b, err := os.ReadFile("../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "## Root parses nothing")
	if !ok {
		t.Fatal("docs/security.md has no section \"Root parses nothing\"")
	}
	_, table, _ := strings.Cut(section, "| request | root does | why root |\n|---|---|---|\n")
	table, _, _ = strings.Cut(table, "\n\n")
	var rows []string
	for _, l := range strings.Split(table, "\n") {
		if name, _, ok := strings.Cut(strings.TrimPrefix(l, "| "), " |"); ok {
			rows = append(rows, name)
		}
	}
	var ops []string
	for _, op := range privilegedOps {
		ops = append(ops, op.Request)
	}
	if strings.Join(rows, ", ") != strings.Join(ops, ", ") {
		t.Fatalf("docs/security.md lists the privileged requests\n  %s\nthe code (privilegedOps) serves\n  %s", strings.Join(rows, ", "), strings.Join(ops, ", "))
	}
}

// Root gives the user only what it has just made. A hard link to a file of
// root's put at the user's .lock (fs.protected_hardlinks = 0 allows it) is
// refused, not chowned; an existing directory of root's named as the stage
// dir stays root's and is refused.
func TestStageForGivesAwayOnlyWhatRootMade(t *testing.T) {
	needRoot(t)
	p := clitest.NewProbeImage(t)
	makePublic(t, p.Work)
	top := publicDir(t)
	cli := publicCLI(t, top)
	home := userDir(t, top, "home", victimUID)
	secret := filepath.Join(home, "secret") // root's, as /etc/shadow
	if err := os.WriteFile(secret, []byte("root's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stage := userDir(t, home, "stage", victimUID)
	if err := os.Chmod(stage, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(secret, filepath.Join(stage, ".lock")); err != nil {
		t.Fatal(err)
	}
	rootDir := filepath.Join(home, "rootdir")
	if err := os.Mkdir(rootDir, 0o700); err != nil {
		t.Fatal(err)
	}
	env := clitest.CleanEnv(home)
	for _, c := range []struct{ dir, want string }{
		{stage, "not a regular file with one link"},
		{rootDir, "is owned by uid 0, not 1002"},
	} {
		out, code := runAs(t, 0, env, cli, "stage", "--user", "1002:1002", "--stage-dir", c.dir, p.Image)
		if code == 0 || !strings.Contains(out, c.want) {
			t.Errorf("stage --user into %s: exit %d, want a refusal saying %q: %s", c.dir, code, c.want, out)
		}
	}
	for _, f := range []string{secret, rootDir} {
		var st syscall.Stat_t
		if err := syscall.Lstat(f, &st); err != nil || st.Uid != 0 {
			t.Errorf("%s: owner uid %d (%v), want root's still", f, st.Uid, err)
		}
	}
}

// Root reads not a byte of the image: under strace -f, root's stage --user
// makes no read, pread, readv or mmap of the image's descriptor in any
// thread of root's, while its parsing child does (which shows that the
// trace sees such reads at all).
func TestStageForRootReadsNoImageByte(t *testing.T) {
	needRoot(t)
	p := clitest.NewProbeImage(t)
	makePublic(t, p.Work)
	top := publicDir(t)
	cli := publicCLI(t, top)
	home := userDir(t, top, "home", victimUID)
	log := filepath.Join(t.TempDir(), "strace.log")
	out, code := runAs(t, 0, clitest.CleanEnv(home), "/usr/bin/strace", "-f", "-qq", "-y", "-o", log,
		"-e", "trace=execve,clone,clone3,fork,vfork,read,pread64,readv,preadv,preadv2,mmap",
		cli, "stage", "--user", "1002:1002", "--stage-dir", filepath.Join(home, "stage"), p.Image)
	if code != 0 {
		t.Fatalf("stage --user under strace: exit %d: %s", code, out)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	parent := map[int]int{}
	child := 0
	type call struct {
		tid  int
		line string
	}
	var reads []call
	for _, l := range strings.Split(string(b), "\n") {
		tidText, rest, ok := strings.Cut(l, " ")
		tid, err := strconv.Atoi(tidText)
		if !ok || err != nil {
			continue
		}
		switch {
		case strings.Contains(rest, "execve(") && strings.Contains(rest, StageChildVerb) && !strings.Contains(rest, "--remove") && child == 0:
			child = tid
		case strings.Contains(rest, "clone") || strings.Contains(rest, "fork"):
			if i := strings.LastIndex(rest, " = "); i > 0 {
				if n, err := strconv.Atoi(strings.TrimSpace(rest[i+3:])); err == nil && n > 0 {
					parent[n] = tid
				}
			}
		case strings.Contains(rest, "<"+p.Image+">"):
			reads = append(reads, call{tid, l})
		}
	}
	if child == 0 {
		t.Fatalf("no parsing child in the trace:\n%s", b)
	}
	ofChild := func(tid int) bool {
		for n := 0; tid != 0 && n < 1000; n++ {
			if tid == child {
				return true
			}
			tid = parent[tid]
		}
		return false
	}
	childReads := 0
	for _, c := range reads {
		if ofChild(c.tid) {
			childReads++
		} else {
			t.Errorf("root read the image: %s", c.line)
		}
	}
	if childReads == 0 {
		t.Fatalf("the trace shows no read of the image by the child either: the test sees nothing\n%s", b)
	}
}

// A corrupt image (control bytes in it): the child's own error, the
// decoder's, is root's message, without the child's verb and with no raw
// control byte, and nothing is left in the stage dir but the lock root gave
// the user.
func TestStageForReportsTheChildsError(t *testing.T) {
	needRoot(t)
	top := publicDir(t)
	cli := publicCLI(t, top)
	home := userDir(t, top, "home", victimUID)
	img := filepath.Join(top, "corrupt.dlimg")
	if err := os.WriteFile(img, []byte(strings.Repeat("\x1b]0;pwned\x07 not an image\n", 8)), 0o644); err != nil {
		t.Fatal(err)
	}
	want, err := image.OpenFile(img)
	if err == nil {
		want.Close()
		t.Fatal("the corrupt image opens")
	}
	stage := filepath.Join(home, "stage")
	out, code := runAs(t, 0, clitest.CleanEnv(home), cli, "stage", "--user", "1002:1002", "--stage-dir", stage, img)
	if code != 1 || !strings.Contains(out, err.Error()) || strings.Contains(out, StageChildVerb) || strings.ContainsAny(out, "\x1b\x07") {
		t.Fatalf("stage --user of a corrupt image: exit %d, want 1 and the decoder's error %q: %q", code, err, out)
	}
	if names := stageNames(t, stage, ""); strings.Join(names, " ") != ".lock" {
		t.Fatalf("left in the stage dir: %v", names)
	}
}

// --user takes a name from the passwd database (its uid, group and groups);
// an unknown name, or a bare uid without a passwd entry, is a usage error
// that says what to give.
func TestStageForUserByName(t *testing.T) {
	needRoot(t)
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Fatalf("the test needs the nobody user: %v", err)
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)
	p := clitest.NewProbeImage(t)
	makePublic(t, p.Work)
	top := publicDir(t)
	cli := publicCLI(t, top)
	home := userDir(t, top, "nobody", uid)
	stage := filepath.Join(home, "stage")
	env := clitest.CleanEnv(home)
	if out, code := runAs(t, 0, env, cli, "stage", "--user", "nobody", "--stage-dir", stage, p.Image); code != 0 {
		t.Fatalf("stage --user nobody: exit %d: %s", code, out)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(stage, &st); err != nil || int(st.Uid) != uid || int(st.Gid) != gid {
		t.Fatalf("%s: uid %d gid %d (%v), want nobody's %d:%d", stage, st.Uid, st.Gid, err, uid, gid)
	}
	if got := stageNames(t, stage, "sha256-"); len(got) != 1 {
		t.Fatalf("no stage for nobody: %v", got)
	}
	for _, c := range []struct{ user, want string }{
		{"no-such-user-here", "give a name, or UID:GID"},
		{"4242", "give a name, or UID:GID"},
	} {
		out, code := runAs(t, 0, env, cli, "stage", "--user", c.user, "--stage-dir", stage, p.Image)
		if code != 2 || !strings.Contains(out, c.want) {
			t.Errorf("stage --user %s: exit %d, want 2 and %q: %s", c.user, code, c.want, out)
		}
	}
}

// Root's `dlbundle stage IMAGE` in a Slurm Prolog (slurmd sets
// SLURM_SCRIPT_CONTEXT=prolog_slurmd, SLURM_JOB_UID and SLURM_JOB_GID)
// stages for the job's user, in the user's stage dir (%U is the user's),
// where the job's ranks find it; outside a Prolog root's stage is root's.
func TestStageInPrologIsForTheJobsUser(t *testing.T) {
	needRoot(t)
	p := clitest.NewProbeImage(t)
	makePublic(t, p.Work)
	top := publicDir(t)
	cli := publicCLI(t, top)
	home := userDir(t, top, "home", victimUID)
	job := append(clitest.CleanEnv(home), "SLURM_JOB_ID=95", "DLBUNDLE_STAGE_DIR="+filepath.Join(home, "prolog-%U"))
	prolog := append(job, "SLURM_SCRIPT_CONTEXT=prolog_slurmd", "SLURM_JOB_UID=1002", "SLURM_JOB_GID=1002")
	out, code := runAs(t, 0, prolog, cli, "stage", p.Image)
	stage := filepath.Join(home, "prolog-1002")
	if code != 0 || !strings.Contains(out, "staged "+p.Image+": "+stage+"/sha256-") {
		t.Fatalf("root's stage in a Prolog: exit %d: %s", code, out)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(stage, &st); err != nil || st.Uid != victimUID {
		t.Fatalf("%s: uid %d (%v), want the job's user 1002", stage, st.Uid, err)
	}
	rank := append(job, "SLURM_STEP_ID=0", "SLURM_PROCID=0")
	out, code = runAs(t, victimUID, rank, cli, "exec", p.Image, "--", p.Original)
	if code != 0 || clitest.Field(out, "argv0") != p.Original {
		t.Fatalf("the job's rank after the Prolog: exit %d: %s", code, out)
	}
	if left := stageNames(t, stage, "sha256-"); len(left) != 1 {
		t.Fatalf("the rank staged again: %v", left)
	}
	notProlog := append(clitest.CleanEnv(home), "SLURM_JOB_ID=95", "SLURM_JOB_UID=1002", "SLURM_JOB_GID=1002", "DLBUNDLE_STAGE_DIR="+filepath.Join(top, "root-%U"))
	if out, code := runAs(t, 0, notProlog, cli, "stage", p.Image); code != 0 || !strings.Contains(out, filepath.Join(top, "root-0")) {
		t.Fatalf("root's stage outside a Prolog: exit %d, want root's own stage dir: %s", code, out)
	}
}

package image

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// swapAttacker is the other user of the extraction race: in a loop, it renames
// every directory extraction has just created in DIR and plants a symlink
// to VICTIM in its place (spec "DIR|VICTIM"), until killed.
func swapAttacker(spec string) int {
	dir, victim, _ := strings.Cut(spec, "|")
	for n := 0; ; n++ {
		d, err := os.Open(dir)
		if err != nil {
			continue
		}
		names, _ := d.Readdirnames(-1)
		d.Close()
		for _, name := range names {
			p := filepath.Join(dir, name)
			if fi, err := os.Lstat(p); err == nil && fi.IsDir() && !strings.Contains(name, ".moved") {
				if os.Rename(p, fmt.Sprintf("%s.moved-%d", p, n)) == nil {
					os.Symlink(victim, p)
				}
			}
		}
	}
}

// The extraction race (5 of 5 runs once wrote outside DIR on main
// 9f80a42): DIR may exist, empty, and belong to anyone; while root
// extracts, DIR's owner swaps the directory root just created for a
// symlink to a root-only directory. Root then wrote the image's files
// there and chmod'ed it 0700 -> 0755.
//
// Now a DIR another user owns is refused outright, naming its owner; and
// in a DIR of root's that others may write (mode 0777), the same attacker
// cannot make extraction write outside it: every creation is relative to a
// directory descriptor extraction opened itself, with O_NOFOLLOW. The
// extraction then fails (the tree was changed under it) or succeeds; the
// victim directory is untouched either way.
func TestExtractRefusesSwappedDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test runs root against an unprivileged attacker (uid 1001); run it as root")
	}
	base, err := os.MkdirTemp("", "format-swap-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	victim := filepath.Join(base, "victim")
	os.Mkdir(victim, 0o700)
	os.WriteFile(filepath.Join(victim, "secret"), []byte("root only\n"), 0o600)
	// An image of 200 top-level directories, each with a lib directory and
	// a file: 200 chances for the swap to land between the creation of a
	// directory and of what goes in it.
	src := t.TempDir()
	payload := filepath.Join(src, "payload")
	os.WriteFile(payload, []byte("payload\n"), 0o644)
	es := []Entry{{Path: "/", Type: TypeDir}}
	for i := 0; i < 200; i++ {
		d := fmt.Sprintf("/d%03d", i)
		es = append(es, Entry{Path: d, Type: TypeDir, Mode: 0o40755}, Entry{Path: d + "/lib", Type: TypeDir, Mode: 0o40755},
			Entry{Path: d + "/lib/evil.so", Type: TypeRegular, Mode: 0o100755, Size: 8, SourcePath: payload})
	}
	img, _ := writeImage(t, es, WriteOptions{Workers: 2})
	im, err := openBytes(img)
	if err != nil {
		t.Fatal(err)
	}
	untouched := func(round string) {
		t.Helper()
		names, _ := os.ReadDir(victim)
		fi, _ := os.Stat(victim)
		sfi, _ := os.Stat(filepath.Join(victim, "secret"))
		if len(names) != 1 || fi.Mode().Perm() != 0o700 || sfi.Mode().Perm() != 0o600 {
			var ns []string
			for _, n := range names {
				ns = append(ns, n.Name())
			}
			t.Fatalf("%s: extraction wrote outside its directory: victim (mode %v) holds %v, secret mode %v", round, fi.Mode(), ns, sfi.Mode())
		}
	}
	// The attacker runs this test binary, copied where uid 1001 can reach it
	// (go test builds it in a directory only root may enter).
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	attacker := filepath.Join(base, "attacker.test")
	if err := os.WriteFile(attacker, self, 0o755); err != nil {
		t.Fatal(err)
	}
	attack := func(dir string) func() {
		cmd := exec.Command(attacker, "-test.run=^$")
		cmd.Env = append(os.Environ(), "DLB_IMAGE_SWAP_ATTACKER="+dir+"|"+victim)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1001, Gid: 1001}}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		return func() { cmd.Process.Kill(); cmd.Wait() }
	}

	// DIR belongs to the attacker: refused before anything is created.
	for round := 0; round < 5; round++ {
		dir := filepath.Join(base, fmt.Sprintf("attacker-%d", round))
		os.Mkdir(dir, 0o755)
		os.Chown(dir, 1001, 1001)
		stop := attack(dir)
		err := im.Extract(context.Background(), dir, ExtractOptions{Workers: 2})
		stop()
		untouched(fmt.Sprintf("attacker's DIR, round %d", round))
		if err == nil || !strings.Contains(err.Error(), "belongs to uid 1001") {
			t.Fatalf("extracting into a directory of uid 1001 as root: %v; want a refusal naming the owner", err)
		}
	}
	// DIR is root's but writable by all: extraction may fail, but writes
	// nothing outside.
	for round := 0; round < 5; round++ {
		dir := filepath.Join(base, fmt.Sprintf("shared-%d", round))
		os.Mkdir(dir, 0o777)
		os.Chmod(dir, 0o777)
		stop := attack(dir)
		err := im.Extract(context.Background(), dir, ExtractOptions{Workers: 2})
		stop()
		untouched(fmt.Sprintf("root's world-writable DIR, round %d", round))
		t.Logf("round %d: %v", round, err)
	}
}

// With fewer directory descriptors held than directories (a low
// RLIMIT_NOFILE, or a tree of thousands of directories), directories are
// reopened from their parents, checked to be the ones made, and the tree
// comes out the same.
func TestExtractReopensDirectories(t *testing.T) {
	in := realSet(t)
	img, _ := writeImage(t, in, WriteOptions{Workers: 2})
	im, err := openBytes(img)
	if err != nil {
		t.Fatal(err)
	}
	defer func(n int) { heldDirsLimit = n }(heldDirsLimit)
	heldDirsLimit = 1
	extractMatches(t, im, in, filepath.Join(t.TempDir(), "x"))
}

// The path to DIR follows a symlink of root or of the caller, in a
// directory of root's or the caller's; another user's symlink is not
// followed (it could point the extraction anywhere).
func TestExtractTargetPathSymlinks(t *testing.T) {
	img, _ := smallImage(t)
	im, err := openBytes(img)
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	real := filepath.Join(base, "real")
	os.Mkdir(real, 0o755)
	mine := filepath.Join(base, "mine")
	os.Symlink("real", mine)
	if err := im.Extract(context.Background(), filepath.Join(mine, "x"), ExtractOptions{}); err != nil {
		t.Fatalf("through a symlink of the caller's: %v", err)
	}
	if _, err := os.Stat(filepath.Join(real, "x", "usr")); err != nil {
		t.Fatalf("the tree is not where the symlink points: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Fatal("the rest runs as root with a symlink of uid 1001; run the tests as root")
	}
	theirs := filepath.Join(base, "theirs")
	os.Symlink("real", theirs)
	os.Lchown(theirs, 1001, 1001)
	err = im.Extract(context.Background(), filepath.Join(theirs, "y"), ExtractOptions{})
	if err == nil || !strings.Contains(err.Error(), "belongs to uid 1001") {
		t.Fatalf("through a symlink of uid 1001: %v; want a refusal naming its owner", err)
	}
	if _, err := os.Lstat(filepath.Join(real, "y")); err == nil {
		t.Fatal("the refused extraction created its target anyway")
	}
}

// A directory another user made in a directory every user can write (uid
// 1001's /tmp/jobs, mode 0755) is theirs, whoever owns what lies below: root
// does not extract below it, even into a directory of its own there (uid
// 1001 could rename it and put another in its place).
func TestExtractRefusesDirectoryOthersMadeInTmp(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("runs as root with a directory of uid 1001; run the tests as root")
	}
	img, _ := smallImage(t)
	im, err := openBytes(img)
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(t.TempDir(), "tmp")
	os.Mkdir(tmp, 0o700)
	os.Chmod(tmp, 0o777|os.ModeSticky)
	jobs := filepath.Join(tmp, "jobs")
	os.Mkdir(jobs, 0o755)
	os.Chown(jobs, 1001, 1001)
	own := filepath.Join(jobs, "root-owned")
	os.Mkdir(own, 0o755)
	for _, dir := range []string{filepath.Join(jobs, "x"), filepath.Join(own, "x")} {
		err := im.Extract(context.Background(), dir, ExtractOptions{})
		if err == nil || !strings.Contains(err.Error(), jobs+", owned by uid 1001 and lies in "+tmp) {
			t.Errorf("extract into %s: %v; want a refusal naming %s and its owner", dir, err, jobs)
		}
		if _, err := os.Lstat(dir); err == nil {
			t.Errorf("the refused extraction created %s", dir)
		}
	}
}

package node

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dlbundle/dlbundle/internal/clitest"
)

// Root's stage --user works in the stage dir with the user's file-system
// credentials: the kernel decides, as the user, whether the stage dir's
// parents may be searched and the stage dir opened, and what is made there
// is the user's as the user made it. The attacker (1001) squats the
// victim's (1002) stage dir name in a sticky directory, open to all and
// private; a stage dir below a directory of root's the victim may not
// search is refused (root could open it); a missing stage dir in a
// directory of root's the victim may search but not write (a site's
// /local/dlbundle) is still made by root and given to the victim.
func TestStageForOpensStageDirAsTheUser(t *testing.T) {
	needRoot(t)
	p := clitest.NewProbeImage(t)
	makePublic(t, p.Work)
	top := publicDir(t)
	cli := publicCLI(t, top)
	shm := stickyDir(t, top, "shm")
	env := clitest.CleanEnv(top)
	stage := func(dir string) (string, int) {
		return runAs(t, 0, env, cli, "stage", "--user", "1002:1002", "--stage-dir", dir, p.Image)
	}

	open := filepath.Join(shm, "dlbundle-1002")
	mkdirOwned(t, open, 0o777, attackerUID)
	private := filepath.Join(shm, "private-1002")
	mkdirOwned(t, private, 0o700, attackerUID)
	rootOnly := filepath.Join(top, "rootonly")
	if err := os.Mkdir(rootOnly, 0o700); err != nil {
		t.Fatal(err)
	}
	site := filepath.Join(top, "site")
	if err := os.Mkdir(site, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ dir, want string }{
		{open, "owned by uid 1001 (squatted)"},
		{private, "owned by uid 1001 (squatted)"},
		{filepath.Join(rootOnly, "stage"), "uid 1002 may not reach it"},
	} {
		out, code := stage(c.dir)
		if code == 0 || !strings.Contains(out, c.want) {
			t.Errorf("stage --user 1002 into %s: exit %d, want a refusal saying %q:\n%s", c.dir, code, c.want, out)
		}
	}
	for _, d := range []string{open, private} {
		if ents, _ := os.ReadDir(d); len(ents) != 0 {
			t.Errorf("root's stage --user wrote into the attacker's %s: %v", d, ents)
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(d, &st); err != nil || st.Uid != attackerUID {
			t.Errorf("%s: owner %d (%v), want the attacker's still", d, st.Uid, err)
		}
	}
	if ents, _ := os.ReadDir(rootOnly); len(ents) != 0 {
		t.Errorf("root made %v in a directory uid 1002 may not search", ents)
	}

	dir := filepath.Join(site, "dlbundle-1002")
	if out, code := stage(dir); code != 0 {
		t.Fatalf("stage --user 1002 into %s (a directory of root's): exit %d:\n%s", dir, code, out)
	}
	if l := stageListing(t, dir); strings.Contains(l, "uid=0 ") || !strings.Contains(l, "sha256-") {
		t.Errorf("the stage root made in %s is not all uid 1002's:\n%s", dir, l)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(dir, &st); err != nil || st.Uid != victimUID || st.Mode&0o777 != 0o700 {
		t.Errorf("%s: uid %d mode %o (%v), want uid 1002's, 0700", dir, st.Uid, st.Mode&0o777, err)
	}
}

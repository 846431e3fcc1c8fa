package node

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRemoveStaleTempsKeepsALiveAliasWrite: a stager holding the lock
// removes a dead writer's alias temp link, but not one a live writer made
// a moment ago outside the lock (a job's consumed or broadcast record
// between its symlinkat and renameat: removing it failed that rank).
func TestRemoveStaleTempsKeepsALiveAliasWrite(t *testing.T) {
	dir := t.TempDir()
	bp := filepath.Join(dir, aliasDirName)
	if err := os.Mkdir(bp, 0o700); err != nil {
		t.Fatal(err)
	}
	live, dead := filepath.Join(bp, ".tmp.live"), filepath.Join(bp, ".tmp.dead")
	for _, p := range []string{live, dead} {
		if err := os.Symlink("../sha256-x", p); err != nil {
			t.Fatal(err)
		}
	}
	old := unix.NsecToTimespec(time.Now().Add(-2 * staleAliasTemp).UnixNano())
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, dead, []unix.Timespec{old, old}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
	if err := removeStaleTemps(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(live); err != nil {
		t.Errorf("a live writer's alias temp was removed: %v", err)
	}
	if _, err := os.Lstat(dead); !os.IsNotExist(err) {
		t.Errorf("a dead writer's alias temp was kept: %v", err)
	}
}

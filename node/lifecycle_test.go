package node

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeStage publishes a stage of size bytes named by hex digit d, last used
// age ago, with an alias.
func fakeStage(t *testing.T, dir string, d string, size int, age time.Duration, alias string) string {
	t.Helper()
	name := "sha256-" + strings.Repeat(d, 64)
	if err := os.MkdirAll(filepath.Join(dir, name, "usr", "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name, "usr", "lib", "libx.so"), make([]byte, size), 0o555); err != nil {
		t.Fatal(err)
	}
	// Staged trees keep the image's modes: a read-only directory must not stop gc.
	os.Chmod(filepath.Join(dir, name, "usr", "lib"), 0o555)
	if err := writeAlias(dir, alias, name); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-age)
	os.Chtimes(filepath.Join(dir, name), old, old)
	ts := []unix.Timespec{unix.NsecToTimespec(old.UnixNano()), unix.NsecToTimespec(old.UnixNano())}
	unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(dir, aliasDirName, alias), ts, unix.AT_SYMLINK_NOFOLLOW)
	return name
}

// TestGCRemovesUnusedKeepsInUse: gc never removes a stage a running process
// uses (here through DLBUNDLE_STAGE in its environment), removes unused ones
// beyond --keep, honours the grace time, and removes the aliases of a
// finished job and dangling ones.
func TestGCRemovesUnusedKeepsInUse(t *testing.T) {
	dir, err := OpenStageDir(filepath.Join(t.TempDir(), "stages"))
	if err != nil {
		t.Fatal(err)
	}
	inUse := fakeStage(t, dir, "a", 1000, time.Hour, "job-7.aaa")
	oldest := fakeStage(t, dir, "b", 3000, 3*time.Hour, "job-6.bbb")
	recent := fakeStage(t, dir, "c", 2000, 2*time.Hour, "job-8.ccc")
	fresh := fakeStage(t, dir, "d", 500, time.Second, "job-9.ddd")
	os.Symlink("../sha256-"+strings.Repeat("e", 64), filepath.Join(dir, aliasDirName, "dangling"))

	user := exec.Command("/bin/sleep", "30")
	user.Env = []string{"DLBUNDLE_STAGE=" + filepath.Join(dir, inUse)}
	if err := user.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { user.Process.Kill(); user.Wait() }()

	stages, err := ListStages(dir)
	if err != nil || len(stages) != 4 {
		t.Fatalf("ls: %v %v", stages, err)
	}
	for _, s := range stages {
		if (s.Name == inUse) != (len(s.InUse) == 1 && s.InUse[0] == user.Process.Pid) {
			t.Errorf("%s in use by %v", s.Name, s.InUse)
		}
		if s.Name == oldest && s.Size != 3000 {
			t.Errorf("size %d", s.Size)
		}
	}
	if stages[0].Name != fresh || stages[3].Name != oldest {
		t.Errorf("not most recently used first: %v", stages)
	}

	// Dry run removes nothing.
	if res, err := GC(context.Background(), dir, GCOptions{Job: "7", Keep: 2500, DryRun: true, Grace: time.Minute}); err != nil || len(res.Stages) != 1 {
		t.Fatalf("dry run: %+v %v", res, err)
	}
	if !isDir(filepath.Join(dir, oldest)) {
		t.Fatal("dry run removed a stage")
	}
	res, err := GC(context.Background(), dir, GCOptions{Job: "7", Keep: 2500, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{inUse: true, oldest: false, recent: true, fresh: true} {
		if isDir(filepath.Join(dir, name)) != want {
			t.Errorf("%s present=%v, want %v (%+v)", name[:8], !want, want, res)
		}
	}
	for alias, want := range map[string]bool{"job-7.aaa": false, "job-6.bbb": false, "job-8.ccc": true, "dangling": false} {
		_, err := os.Lstat(filepath.Join(dir, aliasDirName, alias))
		if (err == nil) != want {
			t.Errorf("alias %s present=%v, want %v", alias, err == nil, want)
		}
	}
	// Without --keep every unused stage past the grace time goes; in use stays.
	if _, err := GC(context.Background(), dir, GCOptions{Grace: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if isDir(filepath.Join(dir, recent)) || !isDir(filepath.Join(dir, inUse)) || !isDir(filepath.Join(dir, fresh)) {
		t.Error("gc without --keep: want recent removed, in-use and fresh (grace) kept")
	}
	if _, err := GC(context.Background(), dir, GCOptions{OlderThan: 2 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if !isDir(filepath.Join(dir, inUse)) {
		t.Error("--older-than removed a stage in use")
	}
}

// TestGCWaitsForStager: gc takes the stage lock, so it never removes a
// stage while an exec is staging or publishing.
func TestGCWaitsForStager(t *testing.T) {
	dir, err := OpenStageDir(filepath.Join(t.TempDir(), "stages"))
	if err != nil {
		t.Fatal(err)
	}
	l, _, err := lockStage(context.Background(), filepath.Join(dir, stageLockName), nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := GC(context.Background(), dir, GCOptions{}); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("gc ran while the stage lock was held: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	l.unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Regression: gc said "0 aliases" after it had removed the aliases of the
// stages it removed. Every alias it removes is counted, whatever the reason.
func TestGCCountsAliasesOfRemovedStages(t *testing.T) {
	dir, err := OpenStageDir(filepath.Join(t.TempDir(), "stages"))
	if err != nil {
		t.Fatal(err)
	}
	name := fakeStage(t, dir, "a", 100, time.Hour, "job-1.aaa")
	if err := writeAlias(dir, "job-2.bbb", name); err != nil {
		t.Fatal(err)
	}
	old := unix.NsecToTimespec(time.Now().Add(-time.Hour).UnixNano())
	unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(dir, aliasDirName, "job-2.bbb"), []unix.Timespec{old, old}, unix.AT_SYMLINK_NOFOLLOW)
	res, err := GC(context.Background(), dir, GCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stages) != 1 || res.Aliases != 2 {
		t.Errorf("gc removed %d stages and reported %d aliases; want 1 stage and its 2 aliases", len(res.Stages), res.Aliases)
	}
	if left, _ := os.ReadDir(filepath.Join(dir, aliasDirName)); len(left) != 0 {
		t.Errorf("aliases left: %v", left)
	}
}

// Regression: a directory in the stage dir whose name merely starts
// with sha256- (made by hand, or by anything else) is not a stage: ls and gc
// leave it alone (ls panicked on "sha256-x").
func TestListStagesIgnoresForeignNames(t *testing.T) {
	dir, err := OpenStageDir(filepath.Join(t.TempDir(), "stages"))
	if err != nil {
		t.Fatal(err)
	}
	real := fakeStage(t, dir, "a", 100, time.Hour, "job-1.aaa")
	for _, n := range []string{"sha256-x", "sha256-" + strings.Repeat("A", 64), "sha256-" + strings.Repeat("a", 65)} {
		if err := os.Mkdir(filepath.Join(dir, n), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	stages, err := ListStages(dir)
	if err != nil || len(stages) != 1 || stages[0].Name != real {
		t.Fatalf("ListStages = %v, %v; want only %s", stages, err, real)
	}
	if _, err := GC(context.Background(), dir, GCOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sha256-x")); err != nil {
		t.Errorf("gc removed a directory that is not a stage: %v", err)
	}
}

// Regression: gc's grace period protected a stage for a minute after
// its alias was WRITTEN (the launch's first rank), not after its last USE: a
// rank of a later launch that found an old stage through its alias, and was
// about to start the app from it, lost it to gc (with --grace 0s, 4 of 300
// racing warm execs here started without their shim: "audit.so cannot be
// loaded as audit interface"). A rank that finds a stage through its alias
// now records that use; gc within the grace time keeps the stage.
func TestGCGraceCountsFromLastUse(t *testing.T) {
	dir, err := OpenStageDir(filepath.Join(t.TempDir(), "stages"))
	if err != nil {
		t.Fatal(err)
	}
	img := &fileImage{data: []byte("app"), files: 1}
	req := StageRequest{Dir: dir, Alias: "job-5.launch",
		Open: func(context.Context) (StageImage, func() error, error) { return img, func() error { return nil }, nil }}
	s, err := Stage(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	// Published and aliased two hours ago.
	old := time.Now().Add(-2 * time.Hour)
	os.Chtimes(s.Dir, old, old)
	ts := []unix.Timespec{unix.NsecToTimespec(old.UnixNano()), unix.NsecToTimespec(old.UnixNano())}
	unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(dir, aliasDirName, req.Alias), ts, unix.AT_SYMLINK_NOFOLLOW)
	// A rank of the launch finds it through the alias (no lock, no image)...
	if s2, err := Stage(context.Background(), req); err != nil || s2.Dir != s.Dir || s2.Materialized {
		t.Fatalf("alias lookup: %+v, %v", s2, err)
	}
	// ...and gc runs before that rank has the stage mapped.
	res, err := GC(context.Background(), dir, GCOptions{Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if !isDir(s.Dir) || len(res.Stages) != 0 {
		t.Errorf("gc removed a stage found through its alias a moment ago (grace 1m): %+v", res)
	}
	if st, err := ListStages(dir); err != nil || len(st) != 1 || time.Since(st[0].LastUse) > time.Minute {
		t.Errorf("last use %v; want the alias lookup's time", st)
	}
}

// The rest of that race: gc lists the stages (the stage unused for hours),
// then a rank finds it through its alias, then gc removes it. removeStage
// renames the stage away and looks at the aliases again: the rank's use
// shows there and the stage is put back. (A rank that checks after the
// rename finds nothing and stages anew under the lock gc holds.)
func TestGCKeepsStageUsedAfterItWasListed(t *testing.T) {
	dir, err := OpenStageDir(filepath.Join(t.TempDir(), "stages"))
	if err != nil {
		t.Fatal(err)
	}
	name := fakeStage(t, dir, "a", 100, 2*time.Hour, "job-5.launch")
	stages, err := ListStages(dir)
	if err != nil || len(stages) != 1 {
		t.Fatalf("%v %v", stages, err)
	}
	if s := lookupAlias(dir, "job-5.launch", nil); s == nil {
		t.Fatal("alias lookup found nothing")
	}
	removed, _, err := removeStage(dir, stages[0])
	if err != nil || removed || !isDir(filepath.Join(dir, name)) {
		t.Errorf("removeStage of a stage used after it was listed: removed %v, %v; want it kept in place", removed, err)
	}
	// Unused since listed: removed, with its alias.
	stages, _ = ListStages(dir)
	removed, aliases, err := removeStage(dir, stages[0])
	if err != nil || !removed || aliases != 1 || isDir(filepath.Join(dir, name)) {
		t.Errorf("removeStage of an unused stage: removed %v, %d aliases, %v", removed, aliases, err)
	}
}

// gc removes the downloads and result of a fetch no process is doing (its
// lock free), by descriptor in the stage dir, and keeps the lock files and
// what a held fetch lock covers.
func TestRemoveIdleFetchesKeepsHeldOnes(t *testing.T) {
	dir, err := OpenStageDir(filepath.Join(t.TempDir(), "stage"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{".fetch-idle.lock", "fetch-idle.dlimg", "fetch-idle.dlimg.partial-1", "fetch-idle.result",
		".fetch-busy.lock", "fetch-busy.dlimg", "fetch-busy.result", "fetch-idleother.dlimg"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	held, err := os.OpenFile(filepath.Join(dir, ".fetch-busy.lock"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := unix.Flock(int(held.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	removeIdleFetches(dir)
	for n, want := range map[string]bool{".fetch-idle.lock": true, "fetch-idle.dlimg": false, "fetch-idle.dlimg.partial-1": false,
		"fetch-idle.result": false, ".fetch-busy.lock": true, "fetch-busy.dlimg": true, "fetch-busy.result": true, "fetch-idleother.dlimg": true} {
		if _, err := os.Lstat(filepath.Join(dir, n)); (err == nil) != want {
			t.Errorf("%s exists: %v, want %v", n, err == nil, want)
		}
	}
}

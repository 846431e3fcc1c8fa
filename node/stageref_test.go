package node

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestGCOnlyRemovesThatStage: with Only, gc considers one stage: the others
// are neither removed nor reported, and the one named is still kept when a
// process uses it.
func TestGCOnlyRemovesThatStage(t *testing.T) {
	dir, err := OpenStageDir(filepath.Join(t.TempDir(), "stages"))
	if err != nil {
		t.Fatal(err)
	}
	a := fakeStage(t, dir, "a", 100, time.Hour, "a1")
	b := fakeStage(t, dir, "b", 100, time.Hour, "b1")
	c := fakeStage(t, dir, "c", 100, time.Hour, "c1")
	user := exec.Command("/bin/sleep", "30")
	user.Env = []string{"DLBUNDLE_STAGE=" + filepath.Join(dir, c)}
	if err := user.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { user.Process.Kill(); user.Wait() }()

	res, err := GC(context.Background(), dir, GCOptions{Only: b, Grace: MinGrace})
	if err != nil || len(res.Stages) != 1 || res.Stages[0].Name != b || len(res.Kept) != 0 || len(res.InUse) != 0 {
		t.Fatalf("gc of %s only: %+v %v", b[:12], res, err)
	}
	if !isDir(filepath.Join(dir, a)) || isDir(filepath.Join(dir, b)) || !isDir(filepath.Join(dir, c)) {
		t.Errorf("gc of %s only: want it gone and the others there", b[:12])
	}
	res, err = GC(context.Background(), dir, GCOptions{Only: c, Grace: MinGrace})
	if err != nil || len(res.Stages) != 0 || len(res.InUse) != 1 || !isDir(filepath.Join(dir, c)) {
		t.Errorf("gc of a stage in use: %+v %v; want it kept, in use", res, err)
	}
}

// TestStageRecordsItsRef: a stage published by Stage says which image
// reference it came from (what ls shows); an older stage without the record
// has none.
func TestStageRecordsItsRef(t *testing.T) {
	dir, err := OpenStageDir(filepath.Join(t.TempDir(), "stages"))
	if err != nil {
		t.Fatal(err)
	}
	old := fakeStage(t, dir, "a", 10, time.Hour, "a1")
	if got := StageRef(dir, old); got != "" {
		t.Errorf("a stage without a record: ref %q", got)
	}
	tmp := filepath.Join(dir, "tmp.x")
	os.Mkdir(tmp, 0o700)
	writeStageRef(tmp, "/lustre/me/app.dlimg")
	name := "sha256-" + strings.Repeat("f", 64)
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
	if got := StageRef(dir, name); got != "/lustre/me/app.dlimg" {
		t.Errorf("ref %q, want /lustre/me/app.dlimg", got)
	}
}

// readStageFiles lists what the image put in the stage at dir: its entries
// without the record of the reference it was staged from (stageRefName).
func readStageFiles(dir string) ([]os.DirEntry, error) {
	names, err := os.ReadDir(dir)
	return slices.DeleteFunc(names, func(e os.DirEntry) bool { return e.Name() == stageRefName }), err
}

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A new run's record prunes the oldest runs' records (and their notes)
// beyond maxRecordFiles, by descriptor in the records dir; the new one is
// kept. A records dir that is a symbolic link (to a directory of the
// user's own elsewhere) is not followed: no record is made.
func TestNodeRecordPrunesOldestAndFollowsNoLink(t *testing.T) {
	stage := filepath.Join(t.TempDir(), "stage")
	if err := os.Mkdir(stage, 0o700); err != nil {
		t.Fatal(err)
	}
	rd, err := openRecordsDir(stage)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if st, err := os.Lstat(filepath.Join(stage, "records")); err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
		t.Fatalf("records dir: %v %v, want a directory, mode 0700", st, err)
	}
	old := time.Now().Add(-time.Hour)
	for i := 0; i < maxRecordFiles+2; i++ {
		p := filepath.Join(stage, "records", fmt.Sprintf("run%02d.report", i))
		for _, f := range []string{p, p[:len(p)-len(".report")] + ".image"} {
			if err := os.WriteFile(f, []byte("x\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			mt := old.Add(time.Duration(i) * time.Second)
			os.Chtimes(f, mt, mt)
		}
	}
	p, created, err := nodeRecord(rd, "new")
	if err != nil || !created || p != filepath.Join(stage, "records", "new.report") {
		t.Fatalf("nodeRecord = %q %v %v", p, created, err)
	}
	for i, want := range map[int]bool{0: false, 1: false, 2: false, 3: true, maxRecordFiles + 1: true} {
		for _, ext := range []string{".report", ".image"} {
			f := filepath.Join(stage, "records", fmt.Sprintf("run%02d%s", i, ext))
			if _, err := os.Lstat(f); (err == nil) != want {
				t.Errorf("%s exists: %v, want %v", f, err == nil, want)
			}
		}
	}
	if _, err := os.Lstat(p); err != nil {
		t.Errorf("the new run's record is gone: %v", err)
	}

	other := filepath.Join(t.TempDir(), "stage")
	elsewhere := filepath.Join(t.TempDir(), "elsewhere")
	for _, d := range []string{other, elsewhere} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(elsewhere, filepath.Join(other, "records")); err != nil {
		t.Fatal(err)
	}
	if rd, err := openRecordsDir(other); err == nil {
		rd.Close()
		t.Fatalf("openRecordsDir followed the records link to %s", elsewhere)
	}
}

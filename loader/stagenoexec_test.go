package loader

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/clitest"
	"github.com/dlbundle/dlbundle/internal/treeimage"
	"github.com/dlbundle/dlbundle/loader/stagefmt"
)

// TestStageRunsNothingFromImage: staging must run nothing
// the image decides, as root (a Prolog) or as a user. The image's ld.so, its
// libc and its python3 are the shell script testdata/hostile/payload.sh,
// which leaves a mark when run; its /lib64 is a symlink to usr/lib64 (the
// layout that made the stager pick the image's ld.so). Before, the stager
// ran STAGE/root/lib64/ld-linux-x86-64.so.2 --help and --list: three marks,
// as uid 0. Now the stage's search rules come from the node's own ld.so.
func TestStageRunsNothingFromImage(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: stages as root and as uid 1001") // make test runs as root (CI too)
	}
	if stagefmt.DynamicLinker() == "" {
		t.Skip("no ld.so known for this architecture")
	}
	bin := clitest.CLI(t)
	top := t.TempDir()
	for _, d := range []string{filepath.Dir(top), top} { // testing's temp dirs are private to root
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	marks := filepath.Join(top, "marks")
	if err := os.Mkdir(marks, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(marks, 0o777) // past the umask: the payload may run as uid 1001
	marker := filepath.Join(marks, "ran")
	payload, err := os.ReadFile(filepath.Join("testdata", "hostile", "payload.sh"))
	if err != nil {
		t.Fatal(err)
	}
	payload = bytes.ReplaceAll(payload, []byte("@MARKER@"), []byte(marker))

	fake := filepath.Join(top, "fake")
	hostile := map[string]image.Kind{
		"usr/lib64/ld-linux-x86-64.so.2":     image.KindELFShared,
		"usr/lib64/libc.so.6":                image.KindELFShared,
		"usr/lib/x86_64-linux-gnu/libc.so.6": image.KindELFShared,
		"usr/bin/python3":                    image.KindELFExec,
	}
	if ld := stagefmt.DynamicLinker(); ld != "/lib64/ld-linux-x86-64.so.2" { // e.g. arm64: its own ld.so name
		hostile["usr/lib"+ld[len("/lib"):]] = image.KindELFShared
	}
	for rel := range hostile {
		p := filepath.Join(fake, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, payload, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"lib64": "usr/lib64", "lib": "usr/lib"} {
		if err := os.Symlink(target, filepath.Join(fake, link)); err != nil {
			t.Fatal(err)
		}
	}
	// The image of the fake tree as its own root (fsEntry: what the build
	// records), every payload called an ELF object as a build would.
	var entries []image.Entry
	err = filepath.WalkDir(fake, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(fake, p)
		e := treeimage.Entry(t, p)
		e.Path, e.SourcePath, e.Order = filepath.Join("/", rel), p, len(entries)
		e.Kind = hostile[rel]
		entries = append(entries, e)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(top, "hostile.dlimg")
	treeimage.Write(t, img, entries)
	os.Chmod(img, 0o644)
	// The CLI as every user can run it (the test cache is private to root).
	self, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(top, "dlbundle")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}

	for _, uid := range []uint32{0, 1001} {
		home := filepath.Join(top, fmt.Sprintf("u%d", uid))
		if err := os.MkdirAll(home, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(home, int(uid), int(uid)); err != nil {
			t.Fatal(err)
		}
		stageDir := filepath.Join(home, "stage")
		cmd := exec.Command(bin, "stage", "--stage-dir", stageDir, img)
		cmd.Env = clitest.CleanEnv(home)
		cmd.Dir = home
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		out, err := cmd.CombinedOutput()
		if b, _ := os.ReadFile(marker); len(b) > 0 {
			t.Fatalf("staging as uid %d ran the image's code:\n%s", uid, b)
		}
		if err != nil {
			t.Fatalf("stage as uid %d: %v\n%s", uid, err, out)
		}
		if strings.Contains(string(out), "ld.so") {
			t.Errorf("stage as uid %d is not quiet about ld.so:\n%s", uid, out)
		}
		// The stage has the node's rules (from the node's ld.so: the image's
		// would have printed nothing usable).
		rules, _ := filepath.Glob(filepath.Join(stageDir, "sha256-*", stagefmt.SearchFile))
		if len(rules) != 1 {
			t.Fatalf("stage as uid %d: no %s in the stage:\n%s", uid, stagefmt.SearchFile, out)
		}
		if b, err := os.ReadFile(rules[0]); err != nil || stagefmt.CheckSearchRules(b) != nil {
			t.Errorf("stage as uid %d: %s: %q, %v", uid, rules[0], b, err)
		}
	}
}

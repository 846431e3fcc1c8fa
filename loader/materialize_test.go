package loader

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/treeimage"
	"github.com/dlbundle/dlbundle/loader/stagefmt"
)

// TestMaterializeLayout checks the stage layout of docs/loader.md on a real
// image: the tree under root/, a table that knows every entry and every
// listed name and holds the listings in native order, the shim objects.
func TestMaterializeLayout(t *testing.T) {
	root := t.TempDir()
	tree := filepath.Join(root, "tree")
	for _, d := range []string{"a/b", "other"} {
		if err := os.MkdirAll(filepath.Join(tree, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(tree, "a/b/f"), []byte("content"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(tree, "a/b/f"), filepath.Join(tree, "a/abs")); err != nil {
		t.Fatal(err)
	}
	// Bundle a/ only: tree/ is an ancestor with a complete listing, so
	// "other" is a listed name that is not itself an entry.
	entries := treeimage.Entries(t, filepath.Join(tree, "a"))
	stage := stageEntries(t, root, entries)

	got, err := os.ReadFile(filepath.Join(stage, "root", tree, "a/abs"))
	if err != nil || string(got) != "content" {
		t.Fatalf("staged absolute symlink does not resolve inside the stage: %q, %v", got, err)
	}
	if l, _ := os.Readlink(filepath.Join(stage, "root", tree, "a/abs")); strings.HasPrefix(l, "/") {
		t.Errorf("staged symlink target %q is absolute: it would leave the stage", l)
	}
	fi, err := os.Stat(filepath.Join(stage, "root", tree, "a/b/f"))
	if err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("staged file mode %v, %v; want 0640", fi.Mode(), err)
	}
	// No listing placeholders: the table serves the listings. A listed
	// directory the image does not bundle is not made either (not one that
	// ld.so probes).
	if _, err := os.Lstat(filepath.Join(stage, "list")); err == nil {
		t.Errorf("the stage has a list/ directory")
	}
	if _, err := os.Lstat(filepath.Join(stage, "root", tree, "other")); err == nil {
		t.Errorf("the listed, unbundled directory %s/other was made in the stage", tree)
	}
	tab, err := os.ReadFile(filepath.Join(stage, "table"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint8{tree: stagefmt.TabDir, tree + "/a": stagefmt.TabDir, tree + "/a/b/f": stagefmt.TabReg, tree + "/a/abs": stagefmt.TabSymlink,
		tree + "/other": stagefmt.TabExternal, "/": stagefmt.TabDir}
	for p, typ := range want {
		if got, _, ok := stagefmt.Lookup(tab, p); !ok || got != typ {
			t.Errorf("table lookup %s = type %d (found %v), want %d", p, got, ok, typ)
		}
	}
	if _, _, ok := stagefmt.Lookup(tab, tree+"/nope"); ok {
		t.Errorf("table has %s/nope", tree)
	}
	// tree's listing: its names, "." and ".." included, in the order the
	// directory read returns them, with their types.
	types := map[string]uint8{"a": stagefmt.DTDir, "other": stagefmt.DTDir, ".": stagefmt.DTDir, "..": stagefmt.DTDir}
	wantList := getdentsNames(t, tree)
	listed, ok := stagefmt.Listing(tab, tree)
	var gotList []string
	for _, g := range listed {
		gotList = append(gotList, g.Name)
		if g.DType != types[g.Name] {
			t.Errorf("listing of %s: %s has d_type %d, want %d", tree, g.Name, g.DType, types[g.Name])
		}
	}
	if !ok || !slices.Equal(gotList, wantList) {
		t.Errorf("listing of %s in the table = %q, want %q", tree, gotList, wantList)
	}
	if tgt, ok := stagefmt.Target(tab, tree+"/a/abs"); !ok || tgt != filepath.Join(tree, "a/b/f") {
		t.Errorf("symlink target in the table = %q, want the original text", tgt)
	}
	for _, obj := range []string{"shim/audit.so", "shim/preload.so"} {
		if fi, err := os.Stat(filepath.Join(stage, obj)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", obj, err)
		}
	}
	if p, ok := StagedPath(stage, filepath.Join(tree, "a/b/f")); ok {
		t.Errorf("StagedPath of a data file = %s; only ELF executables run from the stage", p)
	}
}

// TestShimEnv: the shim goes first, the app's own preloads are kept after it.
func TestShimEnv(t *testing.T) {
	env := ShimEnv("/s", []string{"A=1", "LD_PRELOAD=/x.so", "LD_AUDIT=/y.so", "DLBUNDLE_DEBUG=0"}, EnvOptions{Debug: true})
	want := []string{"A=1", "LD_AUDIT=/s/shim/audit.so:/y.so", "LD_PRELOAD=/s/shim/preload.so:/x.so", "DLBUNDLE_STAGE=/s", "DLBUNDLE_DEBUG=1", "DLBUNDLE_DIRTY="}
	if !slices.Equal(env, want) {
		t.Errorf("ShimEnv = %v\nwant %v", env, want)
	}
	// An outer process's dirty set stays (its writes are on the file system).
	if got := ShimEnv("/s", []string{"DLBUNDLE_DIRTY=/w\n/x"}, EnvOptions{}); !slices.Contains(got, "DLBUNDLE_DIRTY=/w\n/x") {
		t.Errorf("ShimEnv dropped the inherited dirty set: %q", got)
	}
	again := ShimEnv("/s", env, EnvOptions{})
	if n := strings.Count(strings.Join(again, " "), "preload.so"); n != 1 || !slices.Contains(again, "LD_PRELOAD=/s/shim/preload.so:/x.so") {
		t.Errorf("ShimEnv twice: %v; want the shim once and /x.so kept", again)
	}
}

// TestTableRejectsBadPaths: the table only holds clean absolute paths.
func TestTableRejectsBadPaths(t *testing.T) {
	for _, p := range []string{"rel", "/a/../b", "/a/"} {
		if _, err := stagefmt.EncodeTable([]image.Entry{{Path: p, Type: image.TypeRegular}}); err == nil {
			t.Errorf("encodeTable accepted %q", p)
		}
	}
}

// TestStagedPath: a bundled executable reached through symlinks (like
// /bin -> usr/bin) runs from the stage; scripts, unbundled and missing
// paths do not.
func TestStagedPath(t *testing.T) {
	root := t.TempDir()
	tree := filepath.Join(root, "tree")
	if err := os.MkdirAll(filepath.Join(tree, "usr/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	elf, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{"usr/bin/app": elf, "usr/bin/script": []byte("#!/bin/sh\n")} {
		if err := os.WriteFile(filepath.Join(tree, name), content, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"bin": "usr/bin", "usr/bin/app-link": "app", "usr/bin/abs": filepath.Join(tree, "usr/bin/app")} {
		if err := os.Symlink(target, filepath.Join(tree, link)); err != nil {
			t.Fatal(err)
		}
	}
	stage := stageEntries(t, root, treeimage.Entries(t, tree))
	for _, p := range []string{"bin/app", "usr/bin/app", "bin/app-link", "usr/bin/abs", "usr/bin/../bin/app"} {
		orig := filepath.Join(tree, p)
		got, ok := StagedPath(stage, orig)
		if !ok {
			t.Errorf("StagedPath(%s): not bundled", orig)
			continue
		}
		if got != filepath.Join(stage, "root", orig) {
			t.Errorf("StagedPath(%s) = %s", orig, got)
		}
		if err := exec.Command(got).Run(); err != nil {
			t.Errorf("staged %s does not run: %v", got, err)
		}
	}
	for _, p := range []string{"bin/script", "bin/nope", "usr", "usr/bin/app/x"} {
		if got, ok := StagedPath(stage, filepath.Join(tree, p)); ok {
			t.Errorf("StagedPath(%s) = %s, want not bundled", p, got)
		}
	}
}

// getdentsNames is every name getdents(2) returns for dir, "." and ".."
// included, in its order (a decoder of the records independent of the
// build's).
func getdentsNames(t *testing.T, dir string) []string {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var names []string
	buf := make([]byte, 8192)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return names
		}
		for off := 0; off < n; {
			reclen := int(buf[off+16]) | int(buf[off+17])<<8
			name := buf[off+19 : off+reclen]
			names = append(names, string(name[:bytes.IndexByte(name, 0)]))
			off += reclen
		}
	}
}

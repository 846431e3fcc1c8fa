// Package treeimage is for tests only: it makes image entries of a real
// file-system tree as the build step would (with the build's own listing
// reader) and writes an image of them with the real writer, so that the
// tests of the stage's writer (node/materialize) and of the rank side
// (loader) stage real trees from one copy of this code. It must not be
// imported outside tests.
package treeimage

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/squash"
)

// Entries builds image entries from the real file system, as the build
// step would: every path under roots (not following symlinks), plus each
// root's ancestors as directories with their complete listings.
func Entries(t testing.TB, roots ...string) []image.Entry {
	t.Helper()
	var es []image.Entry
	seen := map[string]bool{}
	add := func(p string) {
		if seen[p] {
			return
		}
		seen[p] = true
		es = append(es, Entry(t, p))
	}
	for _, r := range roots {
		var anc []string
		for d := filepath.Dir(r); ; d = filepath.Dir(d) {
			anc = append(anc, d)
			if d == "/" {
				break
			}
		}
		for i := len(anc) - 1; i >= 0; i-- {
			add(anc[i])
		}
		err := filepath.WalkDir(r, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			add(p)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return es
}

// Entry describes one path as lstat(2) shows it.
func Entry(t testing.TB, p string) image.Entry {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	e := image.Entry{Path: p, Mode: st.Mode, MtimeNS: st.Mtim.Nano(), UID: st.Uid, GID: st.Gid,
		Nlink: uint32(st.Nlink), Dev: st.Dev, Ino: st.Ino, CtimeNS: st.Ctim.Nano(), AtimeNS: st.Atim.Nano(),
		Blocks: st.Blocks}
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		e.Type, e.Size = image.TypeRegular, st.Size
	case syscall.S_IFDIR:
		e.Type, e.DirSize = image.TypeDir, st.Size
		// The build's own listing reader: names, types and d_ino.
		ls, dots, err := squash.ReadListing(p)
		if err != nil {
			t.Fatal(err)
		}
		e.Listing, e.DotDotIno = ls, dots.DotDotIno
		if dots.Dot != 0 || dots.DotDot != 1 {
			e.Dots = []int{dots.Dot, dots.DotDot}
		}
	case syscall.S_IFLNK:
		e.Type = image.TypeSymlink
		tgt, err := os.Readlink(p)
		if err != nil {
			t.Fatal(err)
		}
		e.Target = tgt
	default:
		e.Type = image.TypeExternal
	}
	return e
}

// Write writes an image of entries to path with the real writer.
func Write(t testing.TB, path string, entries []image.Entry) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := image.Write(f, entries, image.WriteOptions{Level: 1}); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

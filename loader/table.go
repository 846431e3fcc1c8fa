package loader

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"github.com/dlbundle/dlbundle/image"
)

// The lookup table that the C shim mmaps. The format is specified in
// docs/loader.md and read by loader/shim/table.h; keep the three in step.

const (
	tableMagic     = "DLBTBL1\x00"
	tableVersion   = 2
	tableHeaderLen = 64
	tableEntryLen  = 96
	tableRecordLen = 16 // one name of a directory's listing
)

// d_type values of listing records (dirent.h).
const (
	dtUnknown = 0
	dtDir     = 4
	dtReg     = 8
	dtLnk     = 10
)

// direntType gives a listing record's d_type: "other" (sockets, devices,
// fifos) is DT_UNKNOWN, so that a caller lstats the name (passed through to
// the file system) and learns the native type, which the image does not keep.
func direntType(t image.Type) uint8 {
	switch t {
	case image.TypeRegular:
		return dtReg
	case image.TypeDir:
		return dtDir
	case image.TypeSymlink:
		return dtLnk
	}
	return dtUnknown
}

// Entry types in the table (docs/loader.md).
const (
	tabReg      = 1
	tabDir      = 2
	tabSymlink  = 3
	tabMissing  = 4
	tabExternal = 5
)

// Entry flags.
const (
	flagELFExec = 1 // ELF executable
	flagBlocks  = 2 // the blocks field holds the source's st_blocks
	flagELF     = 4 // the image's kind: an ELF object (shared object, executable, Python extension)
	flagELFNode = 8 // set at staging: the staged copy is ELF of this node's class, byte order, machine
)

// fnv1a64 is the table's hash; the shim computes the same one.
func fnv1a64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// tableRow is one entry before it is encoded.
type tableRow struct {
	path   string
	target string
	typ    uint8
	flags  uint8
	e      image.Entry
}

// listingMode gives the file-type bits for a name known only from a listing.
func listingMode(t image.Type) uint32 {
	switch t {
	case image.TypeRegular:
		return 0o100000
	case image.TypeDir:
		return 0o040000
	case image.TypeSymlink:
		return 0o120000
	}
	return 0
}

// tableRows turns image entries into table rows: one per entry, plus an
// external row for every listed name that is not itself an entry (so that a
// name absent from a bundled directory's listing is a known ENOENT).
func tableRows(entries []image.Entry) ([]tableRow, error) {
	// Rows are large (a whole image.Entry): grown by append, their copies
	// were half of the table's build time. At most one per entry and one
	// per listed name.
	n := len(entries)
	for _, e := range entries {
		n += len(e.Listing)
	}
	byPath := make(map[string]bool, n)
	rows := make([]tableRow, 0, n)
	for _, e := range entries {
		if e.Path == "" || e.Path[0] != '/' || path.Clean(e.Path) != e.Path {
			return nil, fmt.Errorf("lookup table: entry path %q is not absolute and normalised", e.Path)
		}
		if byPath[e.Path] {
			continue // first entry wins (load order)
		}
		byPath[e.Path] = true
		r := tableRow{path: e.Path, e: e}
		switch e.Type {
		case image.TypeRegular:
			r.typ = tabReg
			switch e.Kind {
			case image.KindELFExec:
				r.flags |= flagELFExec | flagELF
			case image.KindELFShared, image.KindPyExtension:
				r.flags |= flagELF
			}
		case image.TypeDir:
			r.typ = tabDir
		case image.TypeSymlink:
			r.typ, r.target = tabSymlink, e.Target
		case image.TypeMissing:
			r.typ = tabMissing
		case image.TypeExternal:
			r.typ = tabExternal
		default:
			return nil, fmt.Errorf("lookup table: entry %s has unknown type %q", e.Path, e.Type)
		}
		rows = append(rows, r)
	}
	for _, e := range entries {
		if e.Type != image.TypeDir {
			continue
		}
		for _, d := range e.Listing {
			if d.Name == "" || d.Name == "." || d.Name == ".." || len(d.Name) > 255 || strings.ContainsAny(d.Name, "/\x00") {
				return nil, fmt.Errorf("lookup table: listing of %s has invalid name %q; the image is corrupt", e.Path, d.Name)
			}
			p := path.Join(e.Path, d.Name)
			if byPath[p] {
				continue
			}
			byPath[p] = true
			// ino: the listing's d_ino, which readdir() of the parent shows.
			rows = append(rows, tableRow{path: p, typ: tabExternal,
				e: image.Entry{Path: p, Mode: listingMode(d.Type), Ino: d.Ino}})
		}
	}
	return rows, nil
}

// tableSize is the length of encodeTable(entries), computed without building
// the rows: Materialize checks it against its bounds before anything is
// built (checkStageCost). A listed name's row is a duplicate only of an
// entry (names in a listing are unique, and directories are), so the joined
// paths need not be kept.
func tableSize(entries []image.Entry) uint64 {
	byPath := make(map[string]bool, len(entries))
	var rows, strs, records uint64
	for _, e := range entries {
		if byPath[e.Path] {
			continue
		}
		byPath[e.Path] = true
		rows++
		strs += uint64(len(e.Path)) + 1
		switch e.Type {
		case image.TypeSymlink:
			strs += uint64(len(e.Target)) + 1
		case image.TypeDir:
			records += 2 + uint64(len(e.Listing)) // ".", "..", the names
		}
	}
	strs += uint64(len(dotNames)) // "." and ".." once
	var buf []byte
	for _, e := range entries {
		if e.Type != image.TypeDir {
			continue
		}
		for _, d := range e.Listing {
			buf = append(append(append(buf[:0], e.Path...), '/'), d.Name...)
			if e.Path == "/" {
				buf = buf[1:]
			}
			p := path.Clean(string(buf)) // as path.Join; usually no copy kept
			if byPath[p] {
				continue
			}
			rows++
			strs += uint64(len(p)) + 1
		}
	}
	nb := uint64(8)
	for nb < 2*rows {
		nb <<= 1
	}
	return align8(tableHeaderLen+4*nb) + tableEntryLen*rows + tableRecordLen*records + strs
}

// dotNames holds the names "." and ".." for every listing's first two
// records (at offsets 0 and 2 of it), written once after the path strings.
const dotNames = ".\x00..\x00"

// encodeTable writes the table for entries (docs/loader.md, version 2). It is
// a pure function of the entries: nothing in it depends on the node.
func encodeTable(entries []image.Entry) ([]byte, error) {
	rows, err := tableRows(entries)
	if err != nil {
		return nil, err
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].path < rows[j].path })
	nb := uint32(8)
	for int(nb) < 2*len(rows) {
		nb <<= 1
	}
	// Where each listing starts (records, not bytes) and how long it is.
	listAt := make([]uint64, len(rows))
	var records uint64
	for i, r := range rows {
		if r.typ == tabDir {
			listAt[i] = records
			records += 2 + uint64(len(r.e.Listing))
		}
	}
	bucketsOff := uint64(tableHeaderLen)
	entriesOff := align8(bucketsOff + 4*uint64(nb))
	listingsOff := entriesOff + tableEntryLen*uint64(len(rows))
	stringsOff := listingsOff + tableRecordLen*records

	// The strings first (paths, symlink targets, then "." and ".."): a
	// listed name is the tail of its own row's path string.
	pathOff := make([]uint64, len(rows))
	targetOff := make([]uint64, len(rows))
	var strs []byte
	addString := func(s string) uint64 {
		off := stringsOff + uint64(len(strs))
		strs = append(strs, s...)
		strs = append(strs, 0)
		return off
	}
	for i, r := range rows {
		pathOff[i] = addString(r.path)
		if r.typ == tabSymlink {
			targetOff[i] = addString(r.target)
		}
	}
	dotOff := stringsOff + uint64(len(strs))
	strs = append(strs, dotNames...)
	if stringsOff+uint64(len(strs)) >= 1<<32 {
		return nil, fmt.Errorf("lookup table: more than 4 GiB of path names and listings")
	}
	rowOf := make(map[string]int, len(rows))
	for i, r := range rows {
		rowOf[r.path] = i
	}

	buf := make([]byte, stringsOff, stringsOff+uint64(len(strs)))
	le := binary.LittleEndian
	buckets := buf[bucketsOff : bucketsOff+4*uint64(nb)]
	for i, r := range rows {
		h := fnv1a64(r.path)
		b := uint32(h) & (nb - 1)
		for le.Uint32(buckets[4*b:]) != 0 {
			b = (b + 1) & (nb - 1)
		}
		le.PutUint32(buckets[4*b:], uint32(i+1))

		ent := buf[entriesOff+tableEntryLen*uint64(i):][:tableEntryLen]
		le.PutUint64(ent[0:], h)
		le.PutUint32(ent[8:], uint32(pathOff[i]))
		le.PutUint32(ent[12:], uint32(len(r.path)))
		switch r.typ {
		case tabSymlink:
			le.PutUint32(ent[16:], uint32(targetOff[i]))
			le.PutUint32(ent[20:], uint32(len(r.target)))
		case tabDir:
			at := listingsOff + tableRecordLen*listAt[i]
			le.PutUint32(ent[16:], uint32(at))
			le.PutUint32(ent[20:], uint32(2+len(r.e.Listing)))
			putListing(buf[at:], r, rows, rowOf, pathOff, dotOff)
		}
		flags := r.flags
		if b := r.e.Blocks; b > 0 && b <= 1<<32-1 {
			flags |= flagBlocks
			le.PutUint32(ent[44:], uint32(b))
		}
		ent[24] = r.typ
		ent[25] = flags
		le.PutUint32(ent[28:], r.e.Mode)
		le.PutUint32(ent[32:], r.e.UID)
		le.PutUint32(ent[36:], r.e.GID)
		le.PutUint32(ent[40:], r.e.Nlink)
		le.PutUint64(ent[48:], uint64(statSize(r)))
		le.PutUint64(ent[56:], uint64(r.e.MtimeNS))
		le.PutUint64(ent[64:], uint64(r.e.AtimeNS))
		le.PutUint64(ent[72:], uint64(r.e.CtimeNS))
		le.PutUint64(ent[80:], r.e.Dev)
		le.PutUint64(ent[88:], r.e.Ino)
	}
	buf = append(buf, strs...)

	copy(buf[0:8], tableMagic)
	le.PutUint32(buf[8:], tableVersion)
	le.PutUint32(buf[12:], nb)
	le.PutUint32(buf[16:], uint32(len(rows)))
	le.PutUint64(buf[24:], bucketsOff)
	le.PutUint64(buf[32:], entriesOff)
	le.PutUint64(buf[40:], stringsOff)
	le.PutUint64(buf[48:], uint64(len(buf)))
	return buf, nil
}

// putListing writes the listing records of directory row r into out: the
// image's names in their order, with "." and ".." where the build's read
// returned them (first in images that do not say). A name points into the
// path string of its own row (tableRows made one for every listed name).
func putListing(out []byte, r tableRow, rows []tableRow, rowOf map[string]int, pathOff []uint64, dotOff uint64) {
	le := binary.LittleEndian
	put := func(k int, ino, name uint64, n int, dt uint8) {
		rec := out[tableRecordLen*k:][:tableRecordLen]
		le.PutUint64(rec[0:], ino)
		le.PutUint32(rec[8:], uint32(name))
		rec[12] = uint8(n)
		rec[13] = dt
	}
	// "..": the d_ino the build read, else (0: not recorded) the parent's
	// row, else 0: the shim shows the staged parent's then.
	up := r.e.DotDotIno
	if up == 0 {
		if k, ok := rowOf[path.Dir(r.path)]; ok {
			up = rows[k].e.Ino
		}
	}
	dot, dotdot := listingDots(r.e)
	put(dot, r.e.Ino, dotOff, 1, dtDir)
	put(dotdot, up, dotOff+2, 2, dtDir)
	skip := uint64(len(r.path)) + 1 // the directory and "/" before a name
	if r.path == "/" {
		skip = 1
	}
	k := 0
	for _, d := range r.e.Listing {
		for k == dot || k == dotdot {
			k++
		}
		child := rowOf[path.Join(r.path, d.Name)]
		put(k, d.Ino, pathOff[child]+skip, len(d.Name), direntType(d.Type))
		k++
	}
}

// listingDots gives the positions of "." and ".." in directory e's served
// listing: where the build's read returned them (e.Dots), else first.
func listingDots(e image.Entry) (dot, dotdot int) {
	n := len(e.Listing) + 2
	if d := e.Dots; len(d) == 2 && d[0] != d[1] && d[0] >= 0 && d[1] >= 0 && d[0] < n && d[1] < n {
		return d[0], d[1]
	}
	return 0, 1
}

// statSize is st_size as the original file system reported it: a regular
// file's content size, a symlink's target length, a directory's recorded
// dir_size. Images built before dir_size was recorded give 0: 4096 (one
// block: ext4, Lustre, NFS from them) is then the common answer.
func statSize(r tableRow) int64 {
	switch r.typ {
	case tabSymlink:
		return int64(len(r.target))
	case tabDir:
		if r.e.DirSize > 0 {
			return r.e.DirSize
		}
		return 4096
	}
	return r.e.Size
}

func align8(n uint64) uint64 { return (n + 7) &^ 7 }

// tableLookup finds path in an encoded table the way the shim does and
// returns the entry's type and flags. Used by tests and StagedPath.
func tableLookup(tab []byte, p string) (typ, flags uint8, ok bool) {
	ent, ok := tableFind(tab, p)
	if !ok {
		return 0, 0, false
	}
	return ent[24], ent[25], true
}

// tableFind returns the encoded entry for p.
func tableFind(tab []byte, p string) ([]byte, bool) {
	le := binary.LittleEndian
	if len(tab) < tableHeaderLen || string(tab[:8]) != tableMagic {
		return nil, false
	}
	nb := le.Uint32(tab[12:])
	bo, eo := le.Uint64(tab[24:]), le.Uint64(tab[32:])
	h := fnv1a64(p)
	for b := uint32(h) & (nb - 1); ; b = (b + 1) & (nb - 1) {
		idx := le.Uint32(tab[bo+4*uint64(b):])
		if idx == 0 {
			return nil, false
		}
		ent := tab[eo+tableEntryLen*uint64(idx-1):][:tableEntryLen]
		if le.Uint64(ent) != h {
			continue
		}
		po, pl := le.Uint32(ent[8:]), le.Uint32(ent[12:])
		if string(tab[po:po+pl]) == p {
			return ent, true
		}
	}
}

// tableTarget returns a symlink entry's link text.
func tableTarget(tab []byte, p string) (string, bool) {
	ent, ok := tableFind(tab, p)
	if !ok || ent[24] != tabSymlink {
		return "", false
	}
	le := binary.LittleEndian
	to, tl := le.Uint32(ent[16:]), le.Uint32(ent[20:])
	return string(tab[to : to+tl]), true
}

// listedName is one record of a directory's listing in an encoded table.
type listedName struct {
	name  string
	ino   uint64
	dtype uint8
}

// tableListing returns the listing of directory p as the shim serves it
// (".", "..", then the names), read the way table.h reads it; ok is false
// when p is not a directory of the table. Used by tests.
func tableListing(tab []byte, p string) (out []listedName, ok bool) {
	ent, ok := tableFind(tab, p)
	if !ok || ent[24] != tabDir {
		return nil, false
	}
	le := binary.LittleEndian
	at, n := uint64(le.Uint32(ent[16:])), uint64(le.Uint32(ent[20:]))
	for k := uint64(0); k < n; k++ {
		rec := tab[at+tableRecordLen*k:][:tableRecordLen]
		no, nl := uint64(le.Uint32(rec[8:])), uint64(rec[12])
		out = append(out, listedName{name: string(tab[no : no+nl]), ino: le.Uint64(rec), dtype: rec[13]})
	}
	return out, true
}

// nodeELF is the ELF identification the audit object accepts as a library
// for this node (audit.c elf_ours, after ld.so's open_verify): class, byte
// order, e_machine. ok false: an architecture the shim does not build for.
func nodeELF() (class, data byte, machine uint16, ok bool) {
	switch runtime.GOARCH {
	case "amd64":
		return 2, 1, 62, true // ELFCLASS64, ELFDATA2LSB, EM_X86_64
	case "arm64":
		return 2, 1, 183, true // EM_AARCH64
	}
	return 0, 0, 0, false
}

// markNodeELF sets flagELFNode in the staged table (dir/table) on every
// regular entry the image calls an ELF object whose staged copy is ELF of
// this node's class, byte order and machine, so that the audit object's
// search answers without opening the file (one open, read and close per
// library per process, otherwise: ~0.4-0.8 ms for 100 libraries on this
// VM). It reads the first 20 bytes of each such file once per node, after
// extraction and before the stage is published. An entry it leaves unset
// (a foreign class, an older stage) is checked by the shim as before.
func markNodeELF(dir string) error {
	class, data, machine, ok := nodeELF()
	if !ok {
		return nil
	}
	tpath := filepath.Join(dir, stageTable)
	tab, err := os.ReadFile(tpath)
	if err != nil {
		return fmt.Errorf("materialize: mark ELF objects: %w", err)
	}
	le := binary.LittleEndian
	if len(tab) < tableHeaderLen || string(tab[:8]) != tableMagic {
		return fmt.Errorf("materialize: mark ELF objects: %s is not a lookup table", tpath)
	}
	n, eo := uint64(le.Uint32(tab[16:])), le.Uint64(tab[32:])
	if eo > uint64(len(tab)) || n > (uint64(len(tab))-eo)/tableEntryLen {
		return fmt.Errorf("materialize: mark ELF objects: %s: entries leave the file", tpath)
	}
	tree, err := openStagedTree(filepath.Join(dir, stageRootDir))
	if err != nil {
		return fmt.Errorf("materialize: mark ELF objects: %w", err)
	}
	defer tree.Close()
	var marks []int64
	var h [20]byte
	for i := uint64(0); i < n; i++ {
		ent := tab[eo+tableEntryLen*i:][:tableEntryLen]
		if ent[24] != tabReg || ent[25]&flagELF == 0 {
			continue
		}
		po, pl := uint64(le.Uint32(ent[8:])), uint64(le.Uint32(ent[12:]))
		if po+pl > uint64(len(tab)) {
			return fmt.Errorf("materialize: mark ELF objects: %s: a path leaves the file", tpath)
		}
		// Read below the staged root only (stagedtree.go): the image's
		// symlinks must not lead the stager elsewhere.
		f, err := tree.open(string(tab[po : po+pl]))
		if err != nil {
			continue // the shim checks it itself (and finds what the kernel says)
		}
		_, err = io.ReadFull(f, h[:])
		f.Close()
		if err == nil && string(h[:4]) == "\x7fELF" && h[4] == class && h[5] == data && le.Uint16(h[18:]) == machine {
			marks = append(marks, int64(eo+tableEntryLen*i+25))
			ent[25] |= flagELFNode
		}
	}
	if len(marks) == 0 {
		return nil
	}
	// The table is written read-only (0444); the stage is not published yet.
	if err := os.Chmod(tpath, 0o644); err != nil {
		return fmt.Errorf("materialize: mark ELF objects: %w", err)
	}
	f, err := os.OpenFile(tpath, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("materialize: mark ELF objects: %w", err)
	}
	for _, off := range marks {
		if _, err := f.WriteAt(tab[off:off+1], off); err != nil {
			f.Close()
			return fmt.Errorf("materialize: mark ELF objects in %s: %w", tpath, err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("materialize: mark ELF objects in %s: %w", tpath, err)
	}
	return os.Chmod(tpath, 0o444)
}

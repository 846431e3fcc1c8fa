package stagefmt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"unsafe"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/binrec"
)

// The lookup table that the C shim mmaps. The format is specified in
// docs/loader.md and read by loader/shim/table.h; keep the three in step.

const (
	tableMagic     = "DLBTBL1\x00"
	tableVersion   = 3
	tableHeaderLen = 64
	tableEntryLen  = 96
	tableRecordLen = 16 // one name of a directory's listing
	tableBucketLen = 8  // a bucket: the entry's index + 1 (uint32), and in the array after the buckets the hash's high half (uint32)
)

// The table's records as the shim reads them: struct dlb_header, dlb_entry
// and dlb_record of loader/shim/table.h, field for field (the C names in the
// tags; table_layout_test.go compiles table.h with gcc and checks every
// field's offset, and the put/get order against encoding/binary). put and
// get are the only code that knows the byte layout (internal/binrec).

// tableHeaderRec is struct dlb_header (tableHeaderLen bytes).
type tableHeaderRec struct {
	Magic     [8]byte `c:"magic"`
	Version   uint32  `c:"version"`
	NBuckets  uint32  `c:"nbuckets"`
	NEntries  uint32  `c:"nentries"`
	SearchLen uint32  `c:"search_len"` // of the node's search rules (WriteSearch), without their NUL; 0: none yet
	Buckets   uint64  `c:"buckets"`    // offsets in the table
	Entries   uint64  `c:"entries"`
	Strings   uint64  `c:"strings"`
	Size      uint64  `c:"size"`   // of the whole table
	Search    uint64  `c:"search"` // offset of the room for the node's search rules (SearchRoom bytes)
}

// EntryRec is struct dlb_entry (tableEntryLen bytes): one path.
type EntryRec struct {
	Hash      uint64 `c:"hash"` // fnv1a64 of the path
	Path      uint32 `c:"path"` // offset of the NUL-terminated path
	PathLen   uint32 `c:"path_len"`
	Target    uint32 `c:"target"`     // symlink: its text; directory: its listing's offset
	TargetLen uint32 `c:"target_len"` // symlink: text length; directory: records
	Type      uint8  `c:"type"`       // TabReg...
	Flags     uint8  `c:"flags"`      // FlagELFExec...
	Reserved0 uint16 `c:"reserved0"`
	Mode      uint32 `c:"mode"`
	UID       uint32 `c:"uid"`
	GID       uint32 `c:"gid"`
	Nlink     uint32 `c:"nlink"`
	Blocks    uint32 `c:"blocks"` // with FlagBlocks
	Size      int64  `c:"size"`
	MtimeNS   int64  `c:"mtime_ns"`
	AtimeNS   int64  `c:"atime_ns"`
	CtimeNS   int64  `c:"ctime_ns"`
	Dev       uint64 `c:"dev"`
	Ino       uint64 `c:"ino"`
}

// tableListRec is struct dlb_record (tableRecordLen bytes): one name of a
// directory's listing.
type tableListRec struct {
	Ino      uint64 `c:"ino"`  // d_ino
	Name     uint32 `c:"name"` // offset of the name
	NameLen  uint8  `c:"name_len"`
	DType    uint8  `c:"d_type"`
	Reserved uint16 `c:"reserved"`
}

func (r *tableHeaderRec) put(b []byte) {
	w := binrec.W{B: b}
	w.Bytes(r.Magic[:])
	w.U32(r.Version)
	w.U32(r.NBuckets)
	w.U32(r.NEntries)
	w.U32(r.SearchLen)
	w.U64(r.Buckets)
	w.U64(r.Entries)
	w.U64(r.Strings)
	w.U64(r.Size)
	w.U64(r.Search)
}

func (r *tableHeaderRec) get(b []byte) {
	g := binrec.R{B: b}
	g.Bytes(r.Magic[:])
	r.Version = g.U32()
	r.NBuckets = g.U32()
	r.NEntries = g.U32()
	r.SearchLen = g.U32()
	r.Buckets = g.U64()
	r.Entries = g.U64()
	r.Strings = g.U64()
	r.Size = g.U64()
	r.Search = g.U64()
}

func (r *EntryRec) put(b []byte) {
	w := binrec.W{B: b}
	w.U64(r.Hash)
	w.U32(r.Path)
	w.U32(r.PathLen)
	w.U32(r.Target)
	w.U32(r.TargetLen)
	w.U8(r.Type)
	w.U8(r.Flags)
	w.U16(r.Reserved0)
	w.U32(r.Mode)
	w.U32(r.UID)
	w.U32(r.GID)
	w.U32(r.Nlink)
	w.U32(r.Blocks)
	w.U64(uint64(r.Size))
	w.U64(uint64(r.MtimeNS))
	w.U64(uint64(r.AtimeNS))
	w.U64(uint64(r.CtimeNS))
	w.U64(r.Dev)
	w.U64(r.Ino)
}

func (r *EntryRec) get(b []byte) {
	g := binrec.R{B: b}
	r.Hash = g.U64()
	r.Path = g.U32()
	r.PathLen = g.U32()
	r.Target = g.U32()
	r.TargetLen = g.U32()
	r.Type = g.U8()
	r.Flags = g.U8()
	r.Reserved0 = g.U16()
	r.Mode = g.U32()
	r.UID = g.U32()
	r.GID = g.U32()
	r.Nlink = g.U32()
	r.Blocks = g.U32()
	r.Size = int64(g.U64())
	r.MtimeNS = int64(g.U64())
	r.AtimeNS = int64(g.U64())
	r.CtimeNS = int64(g.U64())
	r.Dev = g.U64()
	r.Ino = g.U64()
}

func (r *tableListRec) put(b []byte) {
	w := binrec.W{B: b}
	w.U64(r.Ino)
	w.U32(r.Name)
	w.U8(r.NameLen)
	w.U8(r.DType)
	w.U16(r.Reserved)
}

func (r *tableListRec) get(b []byte) {
	g := binrec.R{B: b}
	r.Ino = g.U64()
	r.Name = g.U32()
	r.NameLen = g.U8()
	r.DType = g.U8()
	r.Reserved = g.U16()
}

// tableFlagsOff is where an entry's flags byte lies in its record:
// MarkNodeELF rewrites that byte alone in a written table.
var tableFlagsOff = int64(unsafe.Offsetof(EntryRec{}.Flags))

// d_type values of listing records (dirent.h).
const (
	DTUnknown = 0
	DTDir     = 4
	DTReg     = 8
	DTLnk     = 10
)

// direntType gives a listing record's d_type: "other" (sockets, devices,
// fifos) is DT_UNKNOWN, so that a caller lstats the name (passed through to
// the file system) and learns the native type, which the image does not keep.
func direntType(t image.Type) uint8 {
	switch t {
	case image.TypeRegular:
		return DTReg
	case image.TypeDir:
		return DTDir
	case image.TypeSymlink:
		return DTLnk
	}
	return DTUnknown
}

// Entry types in the table (docs/loader.md).
const (
	TabReg      = 1
	TabDir      = 2
	TabSymlink  = 3
	TabMissing  = 4
	TabExternal = 5
)

// Entry flags.
const (
	FlagELFExec = 1 // ELF executable
	FlagBlocks  = 2 // the blocks field holds the source's st_blocks
	FlagELF     = 4 // the image's kind: an ELF object (shared object, executable, Python extension)
	FlagELFNode = 8 // set at staging: the staged copy is ELF of this node's class, byte order, machine
	// FlagSearchable: every directory above the entry that the table holds
	// as bundled lets others search it (mode o+x), so any user may reach
	// the entry: the shim answers it without checking the path's
	// directories against the process's uid (docs/loader.md).
	FlagSearchable = 16
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

// TableSize is the length of EncodeTable(entries), computed without building
// the rows: the stager checks it against its bounds before anything is
// built (checkStageCost). A listed name's row is a duplicate only of an
// entry (names in a listing are unique, and directories are), so the joined
// paths need not be kept.
func TableSize(entries []image.Entry) uint64 {
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
	hotStrs := strs              // the entries' strings lie before the entry array (EncodeTable)
	strs = uint64(len(dotNames)) // "." and ".." once
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
	return align8(tableHeaderLen+SearchRoom+tableBucketLen*nb+hotStrs) + tableEntryLen*rows + tableRecordLen*records + strs
}

// dotNames holds the names "." and ".." for every listing's first two
// records (at offsets 0 and 2 of it), written once after the path strings.
const dotNames = ".\x00..\x00"

// tableRow is one entry of the table before it is encoded: an image entry
// (e), or a name that only a bundled directory's listing knows (e nil: an
// external row).
type tableRow struct {
	path   string
	e      *image.Entry
	typ    uint8
	flags  uint8
	mode   uint32 // external rows: the listing's file type
	ino    uint64 // external rows: the listing's d_ino
	target string // symlinks
}

// tableRows turns image entries into table rows: one per entry (the first
// of a path wins: load order), plus an external row for every listed name
// that is not itself an entry (so that a name absent from a bundled
// directory's listing is a known ENOENT). It returns the rows and, for
// every directory entry i, the row of each name of its listing (children[i]
// in listing order; nil for other entries).
//
// The encoder runs beside the extraction in every cold stage (and a
// streamed stage's app waits for the table before it starts): rows
// are small, the joined paths of listed names live in one arena, and
// nothing is allocated per name (the round-3 rows held a whole
// image.Entry each and a map of joined paths: 13,000 allocations and
// 3.9 MB for the numpy image, 6 ms warm and 13-17 ms in a fresh helper
// beside the decoders).
func tableRows(entries []image.Entry) (rows []tableRow, entryRow []int32, children [][]int32, err error) {
	names, arenaLen := 0, 0
	for i := range entries {
		e := &entries[i]
		if e.Type != image.TypeDir {
			continue
		}
		names += len(e.Listing)
		for _, d := range e.Listing {
			arenaLen += len(e.Path) + 1 + len(d.Name)
		}
	}
	rowOf := make(map[string]int32, len(entries)+names)
	rows = make([]tableRow, 0, len(entries)+names)
	entryRow = make([]int32, len(entries))
	for i := range entries {
		e := &entries[i]
		entryRow[i] = -1
		if e.Path == "" || e.Path[0] != '/' || path.Clean(e.Path) != e.Path {
			return nil, nil, nil, fmt.Errorf("lookup table: entry path %q is not absolute and normalised", e.Path)
		}
		if _, dup := rowOf[e.Path]; dup {
			continue // first entry wins (load order)
		}
		r := tableRow{path: e.Path, e: e}
		switch e.Type {
		case image.TypeRegular:
			r.typ = TabReg
			switch e.Kind {
			case image.KindELFExec:
				r.flags |= FlagELFExec | FlagELF
			case image.KindELFShared, image.KindPyExtension:
				r.flags |= FlagELF
			}
		case image.TypeDir:
			r.typ = TabDir
		case image.TypeSymlink:
			r.typ, r.target = TabSymlink, e.Target
		case image.TypeMissing:
			r.typ = TabMissing
		case image.TypeExternal:
			r.typ = TabExternal
		default:
			return nil, nil, nil, fmt.Errorf("lookup table: entry %s has unknown type %q", e.Path, e.Type)
		}
		rowOf[e.Path] = int32(len(rows))
		entryRow[i] = int32(len(rows))
		rows = append(rows, r)
	}
	arena := make([]byte, 0, arenaLen)
	children = make([][]int32, len(entries))
	kids := make([]int32, 0, names)
	for i := range entries {
		e := &entries[i]
		if e.Type != image.TypeDir {
			continue
		}
		first := len(kids)
		for _, d := range e.Listing {
			if d.Name == "" || d.Name == "." || d.Name == ".." || len(d.Name) > 255 || strings.ContainsAny(d.Name, "/\x00") {
				return nil, nil, nil, fmt.Errorf("lookup table: listing of %s has invalid name %q; the image is corrupt", e.Path, d.Name)
			}
			// path.Join of a clean directory and a valid name, without
			// an allocation: the string is a view of the arena, which
			// is only appended to (its capacity is exact).
			at := len(arena)
			if e.Path != "/" {
				arena = append(arena, e.Path...)
			}
			arena = append(arena, '/')
			arena = append(arena, d.Name...)
			p := unsafe.String(&arena[at], len(arena)-at)
			k, ok := rowOf[p]
			if !ok {
				// ino: the listing's d_ino, which readdir() of the
				// parent shows.
				k = int32(len(rows))
				rowOf[p] = k
				rows = append(rows, tableRow{path: p, typ: TabExternal, mode: listingMode(d.Type), ino: d.Ino})
			}
			kids = append(kids, k)
		}
		children[i] = kids[first:len(kids):len(kids)]
	}
	return rows, entryRow, children, nil
}

// markSearchable sets FlagSearchable on every row whose bundled ancestor
// directories all have the search bit for others. Directories known only
// from a listing (external) have no permission bits in the table: they are
// taken as searchable, as the shim takes any directory it does not hold.
func markSearchable(rows []tableRow) {
	closed := map[string]bool{} // bundled directories without o+x
	for _, r := range rows {
		if r.typ == TabDir && r.e.Mode&0o001 == 0 {
			closed[r.path] = true
		}
	}
	memo := map[string]bool{}
	var open func(dir string) bool // dir and every directory above it are searchable
	open = func(dir string) bool {
		if v, ok := memo[dir]; ok {
			return v
		}
		v := !closed[dir]
		if dir != "/" {
			v = v && open(path.Dir(dir))
		}
		memo[dir] = v
		return v
	}
	for i := range rows {
		if rows[i].path == "/" || open(path.Dir(rows[i].path)) {
			rows[i].flags |= FlagSearchable
		}
	}
}

// EncodeTable writes the table for entries (docs/loader.md, version 3). It is
// a pure function of the entries: nothing in it depends on the node.
func EncodeTable(entries []image.Entry) ([]byte, error) {
	rows, entryRow, children, err := tableRows(entries)
	if err != nil {
		return nil, err
	}
	markSearchable(rows)
	// Row k of the table is rows[k]: the image's own entries first, in the
	// image's (load) order, then the names only a listing knows (tableRows
	// makes them in that order). A process's start-up looks up the first
	// objects the image loads, and a fault maps the 64 KiB around the page
	// it touches: the entries it reads lie together, not spread over the
	// whole array among the listed names (3,426 of 3,439 rows for
	// /bin/true's image).
	hot := 0 // rows[:hot] are the image's entries
	for hot < len(rows) && rows[hot].e != nil {
		hot++
	}
	// Rows by path, for the parents' inodes of the listings.
	byPath := make([]int32, len(rows))
	for i := range byPath {
		byPath[i] = int32(i)
	}
	slices.SortFunc(byPath, func(a, b int32) int { return strings.Compare(rows[a].path, rows[b].path) })
	// The listing of a directory row is that of its (first) entry.
	listOf := make([]int32, len(rows)) // entry index + 1 of a directory row, else 0
	for i := range entries {
		if r := entryRow[i]; r >= 0 && entries[i].Type == image.TypeDir {
			listOf[r] = int32(i) + 1
		}
	}
	nb := uint32(8)
	for int(nb) < 2*len(rows) {
		nb <<= 1
	}
	// Sizes first, so that the table is allocated once: listings (records,
	// in row order), strings (paths and symlink targets in row order, then
	// "." and ".."). The strings of the image's entries come right after
	// the buckets, before the entry array: with the first entries they are
	// the pages a start-up reads.
	var records, hotStrs, strs uint64
	for i := range rows {
		r := &rows[i]
		n := uint64(len(r.path)) + 1
		if r.typ == TabSymlink {
			n += uint64(len(r.target)) + 1
		}
		if i < hot {
			hotStrs += n
		} else {
			strs += n
		}
		if r.typ == TabDir {
			records += 2 + uint64(len(entries[listOf[i]-1].Listing))
		}
	}
	strs += uint64(len(dotNames))
	bucketsOff := uint64(tableHeaderLen + SearchRoom) // the room for the node's rules first (search.go)
	hotStringsOff := bucketsOff + tableBucketLen*uint64(nb)
	entriesOff := align8(hotStringsOff + hotStrs)
	listingsOff := entriesOff + tableEntryLen*uint64(len(rows))
	stringsOff := listingsOff + tableRecordLen*records
	if stringsOff+strs >= 1<<32 {
		return nil, fmt.Errorf("lookup table: more than 4 GiB of path names and listings")
	}
	buf := make([]byte, stringsOff+strs)
	le := binary.LittleEndian
	pathOff := make([]uint32, len(rows)) // by row index (rows[i])
	so := hotStringsOff
	addString := func(s string) uint32 {
		off := so
		copy(buf[so:], s) // the NUL is already there
		so += uint64(len(s)) + 1
		return uint32(off)
	}
	targetOff := make([]uint32, len(rows))
	addRows := func(from, to int) {
		for i := from; i < to; i++ {
			pathOff[i] = addString(rows[i].path)
			if rows[i].typ == TabSymlink {
				targetOff[i] = addString(rows[i].target)
			}
		}
	}
	addRows(0, hot)
	so = stringsOff
	addRows(hot, len(rows))
	dotOff := so
	copy(buf[so:], dotNames)

	// The buckets: uint32 each, the entry's index + 1 (0: empty), as in
	// version 2 (whose readers, older dlbundle binaries meeting a newer
	// stage, still find every entry); then, one per bucket, the high half
	// of its entry's hash as a tag, which a probe compares before it reads
	// an entry.
	buckets := buf[bucketsOff : bucketsOff+4*uint64(nb)]
	tags := buf[bucketsOff+4*uint64(nb) : bucketsOff+tableBucketLen*uint64(nb)]
	var listAt uint64 // records written so far
	for i := range rows {
		r := &rows[i]
		h := fnv1a64(r.path)
		b := uint32(h) & (nb - 1)
		for le.Uint32(buckets[4*b:]) != 0 {
			b = (b + 1) & (nb - 1)
		}
		le.PutUint32(buckets[4*b:], uint32(i+1))
		le.PutUint32(tags[4*b:], uint32(h>>32))

		ent := EntryRec{Hash: h, Path: pathOff[i], PathLen: uint32(len(r.path))}
		var e image.Entry // an external row's attributes are the listing's
		if r.e != nil {
			e = *r.e
		} else {
			e.Mode, e.Ino = r.mode, r.ino
		}
		switch r.typ {
		case TabSymlink:
			ent.Target, ent.TargetLen = targetOff[i], uint32(len(r.target))
		case TabDir:
			d := int(listOf[i] - 1)
			off := listingsOff + tableRecordLen*listAt
			ent.Target, ent.TargetLen = uint32(off), uint32(2+len(entries[d].Listing))
			putListing(buf[off:], r, &entries[d], children[d], pathOff, dotOff, func(p string) (uint64, bool) {
				j := rowOfPath(rows, byPath, p)
				if j < 0 {
					return 0, false
				}
				return rowIno(&rows[j]), true
			})
			listAt += 2 + uint64(len(entries[d].Listing))
		}
		ent.Flags = r.flags
		if b := e.Blocks; b > 0 && b <= 1<<32-1 {
			ent.Flags |= FlagBlocks
			ent.Blocks = uint32(b)
		}
		ent.Type = r.typ
		ent.Mode, ent.UID, ent.GID, ent.Nlink = e.Mode, e.UID, e.GID, e.Nlink
		ent.Size = statSize(r.typ, r.target, &e)
		ent.MtimeNS, ent.AtimeNS, ent.CtimeNS = e.MtimeNS, e.AtimeNS, e.CtimeNS
		ent.Dev, ent.Ino = e.Dev, e.Ino
		ent.put(buf[entriesOff+tableEntryLen*uint64(i):][:tableEntryLen])
	}
	hdr := tableHeaderRec{Version: tableVersion, NBuckets: nb, NEntries: uint32(len(rows)), Search: tableHeaderLen,
		Buckets: bucketsOff, Entries: entriesOff, Strings: stringsOff, Size: uint64(len(buf))}
	copy(hdr.Magic[:], tableMagic)
	hdr.put(buf[:tableHeaderLen])
	return buf, nil
}

// rowOfPath finds the row of path p by binary search in the sorted order.
func rowOfPath(rows []tableRow, order []int32, p string) int {
	k, ok := slices.BinarySearchFunc(order, p, func(i int32, p string) int { return strings.Compare(rows[i].path, p) })
	if !ok {
		return -1
	}
	return int(order[k])
}

func rowIno(r *tableRow) uint64 {
	if r.e != nil {
		return r.e.Ino
	}
	return r.ino
}

// putListing writes the listing records of directory row r (entry d) into
// out: the image's names in their order, with "." and ".." where the
// build's read returned them (first in images that do not say). A name
// points into the path string of its own row (kids[k], tableRows made one
// for every listed name). inoOf gives the inode of another row by path.
func putListing(out []byte, r *tableRow, d *image.Entry, kids []int32, pathOff []uint32, dotOff uint64, inoOf func(string) (uint64, bool)) {
	put := func(k int, ino, name uint64, n int, dt uint8) {
		rec := tableListRec{Ino: ino, Name: uint32(name), NameLen: uint8(n), DType: dt}
		rec.put(out[tableRecordLen*k:][:tableRecordLen])
	}
	// "..": the d_ino the build read, else (0: not recorded) the parent's
	// row, else 0: the shim shows the staged parent's then.
	up := d.DotDotIno
	if up == 0 {
		if ino, ok := inoOf(path.Dir(r.path)); ok {
			up = ino
		}
	}
	dot, dotdot := listingDots(*d)
	put(dot, d.Ino, dotOff, 1, DTDir)
	put(dotdot, up, dotOff+2, 2, DTDir)
	skip := uint64(len(r.path)) + 1 // the directory and "/" before a name
	if r.path == "/" {
		skip = 1
	}
	k := 0
	for j, c := range d.Listing {
		for k == dot || k == dotdot {
			k++
		}
		put(k, c.Ino, uint64(pathOff[kids[j]])+skip, len(c.Name), direntType(c.Type))
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
func statSize(typ uint8, target string, e *image.Entry) int64 {
	switch typ {
	case TabSymlink:
		return int64(len(target))
	case TabDir:
		if e.DirSize > 0 {
			return e.DirSize
		}
		return 4096
	}
	return e.Size
}

func align8(n uint64) uint64 { return (n + 7) &^ 7 }

// Lookup finds path in an encoded table the way the shim does and
// returns the entry's type and flags.
func Lookup(tab []byte, p string) (typ, flags uint8, ok bool) {
	ent, ok := Find(tab, p)
	if !ok {
		return 0, 0, false
	}
	return ent.Type, ent.Flags, true
}

// Find returns the entry for p, decoded.
func Find(tab []byte, p string) (EntryRec, bool) {
	var hdr tableHeaderRec
	var ent EntryRec
	if len(tab) < tableHeaderLen {
		return ent, false
	}
	hdr.get(tab)
	if string(hdr.Magic[:]) != tableMagic {
		return ent, false
	}
	nb := hdr.NBuckets
	h := fnv1a64(p)
	for b := uint32(h) & (nb - 1); ; b = (b + 1) & (nb - 1) {
		// the buckets: an array of uint32 in versions 2 and 3 (3's tags,
		// after them, only spare the shim a read: not needed here)
		idx := binary.LittleEndian.Uint32(tab[hdr.Buckets+4*uint64(b):])
		if idx == 0 {
			return ent, false
		}
		ent.get(tab[hdr.Entries+tableEntryLen*uint64(idx-1):][:tableEntryLen])
		if ent.Hash != h {
			continue
		}
		if string(tab[ent.Path:ent.Path+ent.PathLen]) == p {
			return ent, true
		}
	}
}

// Target returns a symlink entry's link text.
func Target(tab []byte, p string) (string, bool) {
	ent, ok := Find(tab, p)
	if !ok || ent.Type != TabSymlink {
		return "", false
	}
	return string(tab[ent.Target : ent.Target+ent.TargetLen]), true
}

// ListedName is one record of a directory's listing in an encoded table.
type ListedName struct {
	Name  string
	Ino   uint64 // d_ino
	DType uint8  // d_type
}

// Listing returns the listing of directory p as the shim serves it
// (".", "..", then the names), read the way table.h reads it; ok is false
// when p is not a directory of the table.
func Listing(tab []byte, p string) (out []ListedName, ok bool) {
	ent, ok := Find(tab, p)
	if !ok || ent.Type != TabDir {
		return nil, false
	}
	at, n := uint64(ent.Target), uint64(ent.TargetLen)
	var rec tableListRec
	for k := uint64(0); k < n; k++ {
		rec.get(tab[at+tableRecordLen*k:][:tableRecordLen])
		no, nl := uint64(rec.Name), uint64(rec.NameLen)
		out = append(out, ListedName{Name: string(tab[no : no+nl]), Ino: rec.Ino, DType: rec.DType})
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

// elfHeadLen is how much of a file IsNodeELF needs: e_ident and e_machine.
const elfHeadLen = 20

// IsNodeELF reports whether head, the first bytes of a file, is the start
// of an ELF object of this node's class, byte order and machine (what the
// audit object accepts as a library for this node: FlagELFNode).
func IsNodeELF(head []byte) bool {
	class, data, machine, ok := nodeELF()
	return ok && len(head) >= elfHeadLen && string(head[:4]) == "\x7fELF" && head[4] == class && head[5] == data &&
		binary.LittleEndian.Uint16(head[18:]) == machine
}

// MarkNodeELFIn sets FlagELFNode in tab, an encoded table, on every regular
// entry the image calls an ELF object for which isNode(its path) is true,
// and returns the offsets in tab of the flag bytes it set. Staging asks
// isNode of the bytes it decoded for the file (the first frame of each
// object, as it is written); MarkNodeELF of a written stage reads them back.
func MarkNodeELFIn(tab []byte, isNode func(path string) bool) ([]int64, error) {
	if _, _, _, ok := nodeELF(); !ok {
		return nil, nil
	}
	var hdr tableHeaderRec
	if len(tab) >= tableHeaderLen {
		hdr.get(tab)
	}
	if string(hdr.Magic[:]) != tableMagic {
		return nil, errors.New("not a lookup table")
	}
	n, eo := uint64(hdr.NEntries), hdr.Entries
	if eo > uint64(len(tab)) || n > (uint64(len(tab))-eo)/tableEntryLen {
		return nil, errors.New("entries leave the file")
	}
	var marks []int64
	var ent EntryRec
	for i := uint64(0); i < n; i++ {
		ent.get(tab[eo+tableEntryLen*i:][:tableEntryLen])
		if ent.Type != TabReg || ent.Flags&FlagELF == 0 {
			continue
		}
		po, pl := uint64(ent.Path), uint64(ent.PathLen)
		if po+pl > uint64(len(tab)) {
			return nil, errors.New("a path leaves the file")
		}
		if isNode(string(tab[po : po+pl])) {
			off := int64(eo+tableEntryLen*i) + tableFlagsOff
			marks = append(marks, off)
			tab[off] |= FlagELFNode
		}
	}
	return marks, nil
}

// MarkNodeELF sets FlagELFNode in the staged table (dir/table) on every
// regular entry the image calls an ELF object whose staged copy is ELF of
// this node's class, byte order and machine, so that the audit object's
// search answers without opening the file (one open, read and close per
// library per process, otherwise: ~0.4-0.8 ms for 100 libraries on this
// VM). It reads the first 20 bytes of each such file once per node, after
// extraction and before the stage is published. An entry it leaves unset
// (a foreign class, an older stage) is checked by the shim as before.
func MarkNodeELF(dir string) error {
	if _, _, _, ok := nodeELF(); !ok {
		return nil
	}
	tpath := filepath.Join(dir, TableFile)
	tab, err := os.ReadFile(tpath)
	if err != nil {
		return fmt.Errorf("materialize: mark ELF objects: %w", err)
	}
	tree, err := openStagedTree(filepath.Join(dir, RootDir))
	if err != nil {
		return fmt.Errorf("materialize: mark ELF objects: %w", err)
	}
	defer tree.Close()
	var h [elfHeadLen]byte
	marks, err := MarkNodeELFIn(tab, func(p string) bool {
		// Read below the staged root only (stagedtree.go): the image's
		// symlinks must not lead the stager elsewhere.
		f, err := tree.open(p)
		if err != nil {
			return false // the shim checks it itself (and finds what the kernel says)
		}
		_, err = io.ReadFull(f, h[:])
		f.Close()
		return err == nil && IsNodeELF(h[:])
	})
	if err != nil {
		return fmt.Errorf("materialize: mark ELF objects: %s: %w", tpath, err)
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

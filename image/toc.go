package image

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"

	"github.com/dlbundle/dlbundle/internal/binrec"
)

// The version-2 table of contents (docs/SPEC.md 1.2 to 1.5): a 128-byte
// header, stored uncompressed, that declares every count and size, then one
// zstd frame of the body: fixed-size little-endian records (entries, listing
// names, dots, objects, frames) and two byte areas (strings, meta). The
// header is read and checked against the limits before anything is
// allocated in proportion to the image; the body is then decoded in one
// pass, without reflection, into the Go views the rest of the package uses
// (Entry).

const (
	tocMagic      = "DLBNDTOC"
	tocHeaderSize = 128
	entryRecSize  = 96
	nameRecSize   = 16
	dotsRecSize   = 16
	objectRecSize = 80
	frameRecSize  = 16

	// Fixed limits of a reader (docs/SPEC.md 3.2), checked on the header.
	maxEntries  = 1_000_000
	maxNames    = 2_000_000
	maxTOCBody  = 128 << 20
	maxMetaSize = 1 << 20
	// maxOfKind caps the entries of every type but reg, which carry no
	// content and so cost the stage (an inode and a mkdir per directory, a
	// table row per missing name) and the reader (a record's Go view) what
	// a 2 MB image can declare by the million. What a stage could need: the
	// largest pilots measured hold 60 directories and 5,566 missing names
	// (spack); 262,144 is 40 times that, and bounds a hostile image's
	// entries of these kinds to a quarter of maxEntries (docs/SPEC.md 3.2).
	maxOfKind = 1 << 18
	// maxTOCFrame bounds the TOC frame in the footer: the header and a
	// compressed body (zstd stores incompressible data with ~0.4% overhead).
	maxTOCFrame = skippableHeaderSize + tocHeaderSize + maxTOCBody + maxTOCBody/128 + 4096

	// noObject is an empty regular file's object index.
	noObject = math.MaxUint32
)

// Entry type codes in entry and name records.
var typeCodes = map[Type]byte{TypeRegular: 1, TypeDir: 2, TypeSymlink: 3, TypeMissing: 4, TypeExternal: 5, "other": 6}

var codeTypes = [...]Type{1: TypeRegular, 2: TypeDir, 3: TypeSymlink, 4: TypeMissing, 5: TypeExternal, 6: "other"}

// Kind codes in entry records (0: none).
var kindCodes = map[Kind]byte{"": 0, KindELFShared: 1, KindELFExec: 2, KindPySource: 3, KindPyBytecode: 4,
	KindPyExtension: 5, KindScript: 6, KindData: 7}

var codeKinds = [...]Kind{0: "", 1: KindELFShared, 2: KindELFExec, 3: KindPySource, 4: KindPyBytecode,
	5: KindPyExtension, 6: KindScript, 7: KindData}

// toc is the table of contents as Go values: what the writer encodes and
// what the reader decodes.
type toc struct {
	DataEnd int64
	Arch    string
	Entries []Entry
	Pilots  []json.RawMessage
	Build   map[string]string
}

// tocMeta is the meta area's JSON.
type tocMeta struct {
	Pilots []json.RawMessage `json:"pilots,omitempty"`
	Build  map[string]string `json:"build,omitempty"`
}

// tocHeader is the TOC's fixed-size header.
type tocHeader struct {
	DataEnd      uint64
	BodySize     uint64
	Entries      uint32
	Names        uint32
	Objects      uint32
	Frames       uint32
	StringsSize  uint32
	MetaSize     uint32
	ByType       [5]uint32 // reg, dir, symlink, missing, external
	ContentBytes uint64    // sum of the objects' sizes
	FileBytes    uint64    // sum of the reg entries' sizes
	Arch         string
}

// layout is where each section of the body starts, from the header's counts.
type layout struct{ names, dots, objects, frames, strings, meta, end uint64 }

func (h *tocHeader) layout() layout {
	var l layout
	l.names = entryRecSize * uint64(h.Entries)
	l.dots = l.names + nameRecSize*uint64(h.Names)
	l.objects = l.dots + dotsRecSize*uint64(h.ByType[1]) // one per dir entry
	l.frames = l.objects + objectRecSize*uint64(h.Objects)
	l.strings = l.frames + frameRecSize*uint64(h.Frames)
	l.meta = l.strings + uint64(h.StringsSize)
	l.end = l.meta + uint64(h.MetaSize)
	return l
}

// The records of the TOC as stored (docs/SPEC.md 1.2 to 1.5), field by field
// in the order and sizes of the bytes; put and get are the only code that
// knows the layout (internal/binrec; toc_test.go checks them against
// encoding/binary's encoding of the same structs).

// tocHeaderRec is the 128-byte header.
type tocHeaderRec struct {
	Magic                         [8]byte // tocMagic
	HeaderSize                    uint32  // tocHeaderSize
	Flags                         uint32  // none defined: 0
	DataEnd, BodySize             uint64
	Entries, Names, Objects       uint32
	Frames, StringsSize, MetaSize uint32
	ByType                        [5]uint32 // reg, dir, symlink, missing, external
	Reserved0                     uint32
	ContentBytes, FileBytes       uint64
	Arch                          [16]byte // NUL-padded
	Reserved1                     [16]byte
}

// tocEntryRec is one entry (entryRecSize bytes). A and B depend on the type:
// a regular file's object index (or noObject) and 0; a symlink's target
// (string offset, length); a directory's listing (first name record, count).
type tocEntryRec struct {
	PathOff                   uint32 // in the string area
	PathLen                   uint16
	Type, Kind                uint8 // typeCodes, kindCodes
	Mode, UID, GID, Nlink     uint32
	Dev, Ino, Size            uint64
	MtimeNS, CtimeNS, AtimeNS uint64 // int64 as stored
	Blocks, DirSize           uint64 // int64 as stored
	A, B                      uint32
}

// tocNameRec is one name of a directory's listing (nameRecSize bytes).
type tocNameRec struct {
	NameOff  uint32 // in the string area
	NameLen  uint8
	Type     uint8 // typeCodes
	Reserved uint16
	Ino      uint64 // d_ino
}

// tocDotsRec says where a directory's read returned . and .. (dotsRecSize
// bytes, one per directory entry in load order).
type tocDotsRec struct {
	Dot, DotDot uint32
	DotDotIno   uint64
}

// tocObjectRec is one stored content (objectRecSize bytes): a run of frames
// and its digests.
type tocObjectRec struct {
	FirstFrame, Frames uint32
	Size               uint64
	SHA256             [32]byte // of the content
	FramesSHA256       [32]byte // of the compressed frames
}

// tocFrameRec is one zstd frame in the data (frameRecSize bytes).
type tocFrameRec struct {
	Offset       uint64
	CSize, USize uint32
}

func (r *tocHeaderRec) put(b []byte) {
	w := binrec.W{B: b}
	w.Bytes(r.Magic[:])
	w.U32(r.HeaderSize)
	w.U32(r.Flags)
	w.U64(r.DataEnd)
	w.U64(r.BodySize)
	w.U32(r.Entries)
	w.U32(r.Names)
	w.U32(r.Objects)
	w.U32(r.Frames)
	w.U32(r.StringsSize)
	w.U32(r.MetaSize)
	for _, n := range r.ByType {
		w.U32(n)
	}
	w.U32(r.Reserved0)
	w.U64(r.ContentBytes)
	w.U64(r.FileBytes)
	w.Bytes(r.Arch[:])
	w.Bytes(r.Reserved1[:])
}

func (r *tocHeaderRec) get(b []byte) {
	g := binrec.R{B: b}
	g.Bytes(r.Magic[:])
	r.HeaderSize = g.U32()
	r.Flags = g.U32()
	r.DataEnd = g.U64()
	r.BodySize = g.U64()
	r.Entries = g.U32()
	r.Names = g.U32()
	r.Objects = g.U32()
	r.Frames = g.U32()
	r.StringsSize = g.U32()
	r.MetaSize = g.U32()
	for i := range r.ByType {
		r.ByType[i] = g.U32()
	}
	r.Reserved0 = g.U32()
	r.ContentBytes = g.U64()
	r.FileBytes = g.U64()
	g.Bytes(r.Arch[:])
	g.Bytes(r.Reserved1[:])
}

func (r *tocEntryRec) put(b []byte) {
	w := binrec.W{B: b}
	w.U32(r.PathOff)
	w.U16(r.PathLen)
	w.U8(r.Type)
	w.U8(r.Kind)
	w.U32(r.Mode)
	w.U32(r.UID)
	w.U32(r.GID)
	w.U32(r.Nlink)
	w.U64(r.Dev)
	w.U64(r.Ino)
	w.U64(r.Size)
	w.U64(r.MtimeNS)
	w.U64(r.CtimeNS)
	w.U64(r.AtimeNS)
	w.U64(r.Blocks)
	w.U64(r.DirSize)
	w.U32(r.A)
	w.U32(r.B)
}

func (r *tocEntryRec) get(b []byte) {
	g := binrec.R{B: b}
	r.PathOff = g.U32()
	r.PathLen = g.U16()
	r.Type = g.U8()
	r.Kind = g.U8()
	r.Mode = g.U32()
	r.UID = g.U32()
	r.GID = g.U32()
	r.Nlink = g.U32()
	r.Dev = g.U64()
	r.Ino = g.U64()
	r.Size = g.U64()
	r.MtimeNS = g.U64()
	r.CtimeNS = g.U64()
	r.AtimeNS = g.U64()
	r.Blocks = g.U64()
	r.DirSize = g.U64()
	r.A = g.U32()
	r.B = g.U32()
}

func (r *tocNameRec) put(b []byte) {
	w := binrec.W{B: b}
	w.U32(r.NameOff)
	w.U8(r.NameLen)
	w.U8(r.Type)
	w.U16(r.Reserved)
	w.U64(r.Ino)
}

func (r *tocNameRec) get(b []byte) {
	g := binrec.R{B: b}
	r.NameOff = g.U32()
	r.NameLen = g.U8()
	r.Type = g.U8()
	r.Reserved = g.U16()
	r.Ino = g.U64()
}

func (r *tocDotsRec) put(b []byte) {
	w := binrec.W{B: b}
	w.U32(r.Dot)
	w.U32(r.DotDot)
	w.U64(r.DotDotIno)
}

func (r *tocDotsRec) get(b []byte) {
	g := binrec.R{B: b}
	r.Dot = g.U32()
	r.DotDot = g.U32()
	r.DotDotIno = g.U64()
}

func (r *tocObjectRec) put(b []byte) {
	w := binrec.W{B: b}
	w.U32(r.FirstFrame)
	w.U32(r.Frames)
	w.U64(r.Size)
	w.Bytes(r.SHA256[:])
	w.Bytes(r.FramesSHA256[:])
}

func (r *tocObjectRec) get(b []byte) {
	g := binrec.R{B: b}
	r.FirstFrame = g.U32()
	r.Frames = g.U32()
	r.Size = g.U64()
	g.Bytes(r.SHA256[:])
	g.Bytes(r.FramesSHA256[:])
}

func (r *tocFrameRec) put(b []byte) {
	w := binrec.W{B: b}
	w.U64(r.Offset)
	w.U32(r.CSize)
	w.U32(r.USize)
}

func (r *tocFrameRec) get(b []byte) {
	g := binrec.R{B: b}
	r.Offset = g.U64()
	r.CSize = g.U32()
	r.USize = g.U32()
}

func (h *tocHeader) marshal() []byte {
	r := tocHeaderRec{HeaderSize: tocHeaderSize, DataEnd: h.DataEnd, BodySize: h.BodySize,
		Entries: h.Entries, Names: h.Names, Objects: h.Objects, Frames: h.Frames,
		StringsSize: h.StringsSize, MetaSize: h.MetaSize, ByType: h.ByType,
		ContentBytes: h.ContentBytes, FileBytes: h.FileBytes}
	copy(r.Magic[:], tocMagic)
	copy(r.Arch[:], h.Arch)
	b := make([]byte, tocHeaderSize)
	r.put(b)
	return b
}

// parseTOCHeader reads and checks the header against the fixed limits:
// nothing in proportion to the image has been read or allocated yet.
func parseTOCHeader(b []byte, dataEnd int64) (tocHeader, error) {
	var h tocHeader
	if len(b) < tocHeaderSize {
		return h, fmt.Errorf("no table-of-contents header (corrupt image)")
	}
	var r tocHeaderRec
	r.get(b)
	if string(r.Magic[:]) != tocMagic || r.HeaderSize != tocHeaderSize {
		return h, fmt.Errorf("no table-of-contents header (corrupt image)")
	}
	if r.Flags != 0 || r.Reserved0 != 0 || !allZero(r.Reserved1[:]) {
		return h, fmt.Errorf("table-of-contents header has unknown flags or reserved fields set (corrupt image or newer writer)")
	}
	h.DataEnd, h.BodySize = r.DataEnd, r.BodySize
	h.Entries, h.Names, h.Objects, h.Frames = r.Entries, r.Names, r.Objects, r.Frames
	h.StringsSize, h.MetaSize = r.StringsSize, r.MetaSize
	h.ByType = r.ByType
	var sum uint64
	for _, n := range h.ByType {
		sum += uint64(n)
	}
	h.ContentBytes, h.FileBytes = r.ContentBytes, r.FileBytes
	arch, err := parseArch(r.Arch[:])
	if err != nil {
		return h, err
	}
	h.Arch = arch
	switch {
	case h.DataEnd != uint64(dataEnd):
		return h, fmt.Errorf("table of contents says data ends at %d, the footer %d (corrupt image)", h.DataEnd, dataEnd)
	case h.Entries > maxEntries:
		return h, fmt.Errorf("table of contents declares %d entries, more than the %d this reader accepts (docs/SPEC.md 3.2); refusing before reading it (corrupt or hostile image)", h.Entries, maxEntries)
	case maxOfKindExceeded(&h) >= 0:
		k := maxOfKindExceeded(&h)
		return h, fmt.Errorf("table of contents declares %d %s entries, more than the %d of each kind but reg this reader accepts (docs/SPEC.md 3.2); refusing before reading it (corrupt or hostile image)", h.ByType[k], codeTypes[k+1], maxOfKind)
	case h.Names > maxNames:
		return h, fmt.Errorf("table of contents declares %d listed names, more than the %d this reader accepts (docs/SPEC.md 3.2); refusing before reading it (corrupt or hostile image)", h.Names, maxNames)
	case h.BodySize > maxTOCBody:
		return h, fmt.Errorf("table of contents declares %d bytes, more than the %d this reader accepts (docs/SPEC.md 3.2); refusing before reading it (corrupt or hostile image)", h.BodySize, maxTOCBody)
	case h.MetaSize > maxMetaSize:
		return h, fmt.Errorf("table of contents declares %d bytes of build information, more than %d (corrupt or hostile image)", h.MetaSize, maxMetaSize)
	case h.ByType[1] > 0 && h.layout().end == h.BodySize+dotsRecSize*uint64(h.ByType[1]):
		// Written by a development build of version 2, before the dots
		// table (docs/SPEC.md 4): say so rather than "corrupt".
		return h, fmt.Errorf("image written by a development build of format version 2 (no positions of . and .. in its table of contents): rebuild with dlbundle build")
	case h.layout().end != h.BodySize:
		return h, fmt.Errorf("table-of-contents header declares %d bytes, its counts make %d (corrupt image)", h.BodySize, h.layout().end)
	case sum != uint64(h.Entries):
		return h, fmt.Errorf("table-of-contents header counts %d entries by type, %d in all (corrupt image)", sum, h.Entries)
	case h.Objects > h.ByType[0] || h.Frames < h.Objects || uint64(h.Frames) > h.DataEnd:
		return h, fmt.Errorf("table-of-contents header declares %d objects in %d frames for %d regular files and %d data bytes (corrupt image)", h.Objects, h.Frames, h.ByType[0], h.DataEnd)
	case h.ContentBytes > h.FileBytes || h.ContentBytes > h.DataEnd*maxFrameRatio:
		return h, fmt.Errorf("table-of-contents header declares %d content bytes for %d bytes of files in %d data bytes (corrupt or hostile image)", h.ContentBytes, h.FileBytes, h.DataEnd)
	}
	return h, nil
}

// maxOfKindExceeded is the index in ByType of the first kind (reg
// excepted) declared more than maxOfKind times, or -1.
func maxOfKindExceeded(h *tocHeader) int {
	for k, n := range h.ByType {
		if k > 0 && n > maxOfKind {
			return k
		}
	}
	return -1
}

// parseArch reads the NUL-padded arch field: 1..15 of [a-z0-9_-].
func parseArch(b []byte) (string, error) {
	n := bytes.IndexByte(b, 0)
	if n < 0 {
		n = len(b)
	}
	ok := n > 0 && n < len(b) && allZero(b[n:])
	for _, c := range b[:n] {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			ok = false
		}
	}
	if !ok {
		return "", fmt.Errorf("table-of-contents header has an invalid architecture %q (corrupt image)", b)
	}
	return string(b[:n]), nil
}

// encodeTOC serialises t. Entries sharing content (equal frames and
// digests) share one object record. It encodes whatever it is given, even
// what a reader refuses (tests build hostile images with it); it fails only
// on what the records cannot hold at all.
func encodeTOC(t *toc) (tocHeader, []byte, error) {
	h := tocHeader{DataEnd: uint64(t.DataEnd), Arch: t.Arch}
	type object struct {
		first, count uint32
		size         int64
		sum, fsum    string
	}
	var objects []object
	var frames []Frame
	byFirst := map[int64][]uint32{}
	objOf := make([]uint32, len(t.Entries))
	var nNames, nStrings uint64
	for i := range t.Entries {
		e := &t.Entries[i]
		if e.Type != TypeDir && (len(e.Dots) > 0 || e.DotDotIno != 0) {
			return h, nil, fmt.Errorf("entry %d: a %s entry with positions of . and .. or a d_ino of ..; only a directory has them", i, e.Type)
		}
		if code, ok := typeCodes[e.Type]; ok && code <= 5 {
			h.ByType[code-1]++
		} else {
			h.ByType[0]++ // an unknown type is counted as reg: the record says otherwise
		}
		nStrings += uint64(len(e.Path)) + uint64(len(e.Target))
		nNames += uint64(len(e.Listing))
		for _, d := range e.Listing {
			nStrings += uint64(len(d.Name))
		}
		if e.Type == TypeRegular {
			h.FileBytes += uint64(e.Size)
		}
		objOf[i] = noObject
		if len(e.Frames) == 0 {
			continue
		}
		found := false
		for _, o := range byFirst[e.Frames[0].Offset] {
			ob := objects[o]
			if ob.size == e.Size && ob.sum == e.SHA256 && ob.fsum == e.FramesSHA256 && sameFrames(frames[ob.first:ob.first+ob.count], e.Frames) {
				objOf[i], found = o, true
				break
			}
		}
		if found {
			continue
		}
		o := uint32(len(objects))
		objects = append(objects, object{uint32(len(frames)), uint32(len(e.Frames)), e.Size, e.SHA256, e.FramesSHA256})
		frames = append(frames, e.Frames...)
		byFirst[e.Frames[0].Offset] = append(byFirst[e.Frames[0].Offset], o)
		objOf[i] = o
		h.ContentBytes += uint64(e.Size)
	}
	meta, err := json.Marshal(tocMeta{Pilots: t.Pilots, Build: t.Build})
	if err != nil {
		return h, nil, err
	}
	if string(meta) == "{}" {
		meta = nil
	}
	if uint64(len(t.Entries)) > math.MaxUint32 || nNames > math.MaxUint32 || nStrings > math.MaxUint32 || len(meta) > math.MaxUint32 {
		return h, nil, fmt.Errorf("table of contents too large to encode (%d entries, %d names, %d string bytes)", len(t.Entries), nNames, nStrings)
	}
	h.Entries, h.Names, h.Objects, h.Frames = uint32(len(t.Entries)), uint32(nNames), uint32(len(objects)), uint32(len(frames))
	h.StringsSize, h.MetaSize = uint32(nStrings), uint32(len(meta))
	l := h.layout()
	h.BodySize = l.end
	body := make([]byte, l.end)
	str := l.strings // strings cursor: paths and targets in entry order, then names
	put := func(s string) uint32 {
		off := str - l.strings
		copy(body[str:], s)
		str += uint64(len(s))
		return uint32(off)
	}
	var name uint32
	for i := range t.Entries {
		e := &t.Entries[i]
		if len(e.Path) > math.MaxUint16 || len(e.Target) > math.MaxUint32 {
			return h, nil, fmt.Errorf("entry %d: path of %d bytes or target of %d bytes does not fit a record", i, len(e.Path), len(e.Target))
		}
		r := tocEntryRec{PathOff: put(e.Path), PathLen: uint16(len(e.Path)),
			Mode: e.Mode, UID: e.UID, GID: e.GID, Nlink: e.Nlink, Dev: e.Dev, Ino: e.Ino,
			Size: uint64(e.Size), MtimeNS: uint64(e.MtimeNS), CtimeNS: uint64(e.CtimeNS), AtimeNS: uint64(e.AtimeNS),
			Blocks: uint64(e.Blocks), DirSize: uint64(e.DirSize)}
		code, ok := typeCodes[e.Type]
		if !ok || code > 5 {
			code = 0xff
		}
		r.Type = code
		kind, ok := kindCodes[e.Kind]
		if !ok {
			kind = 0xff
		}
		r.Kind = kind
		switch {
		case e.Type == TypeRegular:
			r.A = objOf[i]
		case e.Type == TypeSymlink || e.Target != "":
			// The path's string comes first: strings are in record order.
			r.A, r.B = put(e.Target), uint32(len(e.Target))
		case e.Type == TypeDir || len(e.Listing) > 0:
			r.A, r.B = name, uint32(len(e.Listing))
			name += uint32(len(e.Listing))
		}
		r.put(body[entryRecSize*i : entryRecSize*(i+1)])
	}
	name = 0
	for i := range t.Entries {
		for _, d := range t.Entries[i].Listing {
			if len(d.Name) > math.MaxUint8 {
				return h, nil, fmt.Errorf("entry %d: listed name of %d bytes does not fit a record", i, len(d.Name))
			}
			code, ok := typeCodes[d.Type]
			if !ok {
				code = 0xff
			}
			r := tocNameRec{NameOff: put(d.Name), NameLen: byte(len(d.Name)), Type: code, Ino: d.Ino}
			r.put(body[l.names+nameRecSize*uint64(name):])
			name++
		}
	}
	// One dots record per dir entry. Positions that do not fit are written
	// as 0xFFFFFFFF, which a reader refuses, never truncated into range.
	pos := func(p int) uint32 {
		if p < 0 || uint64(p) > math.MaxUint32 {
			return math.MaxUint32
		}
		return uint32(p)
	}
	dir := 0
	for i := range t.Entries {
		e := &t.Entries[i]
		if e.Type != TypeDir {
			continue
		}
		dot, dotdot := uint32(0), uint32(1)
		if len(e.Dots) > 0 {
			dot, dotdot = math.MaxUint32, math.MaxUint32 // not two positions: refused
			if len(e.Dots) == 2 {
				dot, dotdot = pos(e.Dots[0]), pos(e.Dots[1])
			}
		}
		r := tocDotsRec{Dot: dot, DotDot: dotdot, DotDotIno: e.DotDotIno}
		r.put(body[l.dots+dotsRecSize*uint64(dir):])
		dir++
	}
	for o, ob := range objects {
		r := tocObjectRec{FirstFrame: ob.first, Frames: ob.count, Size: uint64(ob.size)}
		hex.Decode(r.SHA256[:], []byte(ob.sum)) // a bad digest (tests) stays partly zero
		hex.Decode(r.FramesSHA256[:], []byte(ob.fsum))
		r.put(body[l.objects+objectRecSize*uint64(o):])
	}
	for k, f := range frames {
		r := tocFrameRec{Offset: uint64(f.Offset),
			CSize: uint32(min(uint64(f.CSize), math.MaxUint32)), USize: uint32(min(uint64(f.USize), math.MaxUint32))}
		r.put(body[l.frames+frameRecSize*uint64(k):])
	}
	copy(body[l.meta:], meta)
	return h, body, nil
}

func sameFrames(a, b []Frame) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if a[k] != b[k] {
			return false
		}
	}
	return true
}

// decodedTOC is the body as Go values plus what the reader derives from
// the records: each entry's object and each object's owner.
type decodedTOC struct {
	toc
	objOf    []uint32 // per entry: object index, or noObject
	objOwner []int    // per object: the first entry that references it
	meta     []byte   // the meta area, parsed on demand
}

// decodeTOC turns the body into Go values in one pass, checking every
// record's fields, offsets and ranges against the header as it goes (a
// path longer than MaxPathLen is refused at its record). Checks that need
// all entries (uniqueness, nesting, content sharing) are in checkTOC.
func decodeTOC(h *tocHeader, body []byte) (*decodedTOC, error) {
	if uint64(len(body)) != h.BodySize {
		return nil, fmt.Errorf("table of contents holds %d bytes, its header says %d (corrupt image)", len(body), h.BodySize)
	}
	l := h.layout()
	// One string for the whole area: every path, target and name is a
	// substring of it (no allocation per entry; the body can be freed).
	strs := string(body[l.strings:l.meta])
	var cursor uint64 // strings are stored in order, without gaps or overlaps
	str := func(off uint32, n uint64, what string, i int) (string, error) {
		if uint64(off) != cursor || n > uint64(len(strs))-cursor {
			return "", fmt.Errorf("entry %d: %s at string offset %d+%d, expected at %d (strings overlap, are out of order or out of bounds; corrupt image)", i, what, off, n, cursor)
		}
		cursor += n
		return strs[off : uint64(off)+n], nil
	}
	// The meta area is copied (at most 1 MiB) so that nothing keeps the
	// body alive once it is decoded.
	d := &decodedTOC{toc: toc{DataEnd: int64(h.DataEnd), Arch: h.Arch}, meta: bytes.Clone(body[l.meta:l.end])}
	es := make([]Entry, h.Entries)
	d.Entries = es
	d.objOf = make([]uint32, h.Entries)
	names := make([]DirEntry, h.Names)
	var nameNext uint32
	var byType [5]uint32
	var fileBytes uint64
	var r tocEntryRec
	for i := range es {
		r.get(body[entryRecSize*i : entryRecSize*(i+1)])
		e := &es[i]
		e.Order = i
		n := uint64(r.PathLen)
		if n == 0 || n > MaxPathLen {
			return nil, fmt.Errorf("entry %d: path of %d bytes; paths are 1 to %d bytes (docs/SPEC.md 1.3; corrupt or hostile image)", i, n, MaxPathLen)
		}
		var err error
		if e.Path, err = str(r.PathOff, n, "path", i); err != nil {
			return nil, err
		}
		if r.Type == 0 || int(r.Type) > 5 {
			return nil, fmt.Errorf("entry %d (%s): unknown type code %d", i, quote(e.Path), r.Type)
		}
		e.Type = codeTypes[r.Type]
		byType[r.Type-1]++
		if int(r.Kind) >= len(codeKinds) || (r.Kind != 0 && e.Type != TypeRegular) {
			return nil, fmt.Errorf("entry %d (%s): kind code %d for a %s", i, quote(e.Path), r.Kind, e.Type)
		}
		e.Kind = codeKinds[r.Kind]
		e.Mode, e.UID, e.GID, e.Nlink = r.Mode, r.UID, r.GID, r.Nlink
		e.Dev, e.Ino = r.Dev, r.Ino
		size := r.Size
		e.MtimeNS, e.CtimeNS, e.AtimeNS = int64(r.MtimeNS), int64(r.CtimeNS), int64(r.AtimeNS)
		e.Blocks, e.DirSize = int64(r.Blocks), int64(r.DirSize)
		a, b := r.A, r.B
		if size > maxCpioSize || (size != 0 && e.Type != TypeRegular) {
			return nil, fmt.Errorf("entry %d (%s): size %d out of range for a %s", i, quote(e.Path), size, e.Type)
		}
		e.Size = int64(size)
		d.objOf[i] = noObject
		switch e.Type {
		case TypeRegular:
			fileBytes += size
			if b != 0 || (a != noObject && a >= h.Objects) {
				return nil, fmt.Errorf("entry %d (%s): object %d of %d (corrupt image)", i, quote(e.Path), a, h.Objects)
			}
			d.objOf[i] = a
		case TypeSymlink:
			if b == 0 || b > maxTargetLen {
				return nil, fmt.Errorf("entry %d (%s): symlink target of %d bytes; targets are 1 to %d bytes", i, quote(e.Path), b, maxTargetLen)
			}
			if e.Target, err = str(a, uint64(b), "symlink target", i); err != nil {
				return nil, err
			}
		case TypeDir:
			if a != nameNext || uint64(b) > uint64(h.Names)-uint64(nameNext) {
				return nil, fmt.Errorf("entry %d (%s): listing at names %d+%d, expected at %d of %d (corrupt image)", i, quote(e.Path), a, b, nameNext, h.Names)
			}
			if b > 0 {
				e.Listing = names[a : a+b : a+b]
			}
			nameNext += b
		default:
			if a != 0 || b != 0 {
				return nil, fmt.Errorf("entry %d (%s): a %s entry with content, target or listing fields", i, quote(e.Path), e.Type)
			}
		}
	}
	if nameNext != h.Names {
		return nil, fmt.Errorf("directories list %d names, the header declares %d (corrupt image)", nameNext, h.Names)
	}
	if byType != h.ByType || fileBytes != h.FileBytes {
		return nil, fmt.Errorf("table-of-contents header declares %v entries by type and %d bytes of files, the entries are %v and %d (corrupt image)", h.ByType, h.FileBytes, byType, fileBytes)
	}
	var nr tocNameRec
	for k := range names {
		nr.get(body[l.names+nameRecSize*uint64(k):])
		n := uint64(nr.NameLen)
		if n == 0 {
			return nil, fmt.Errorf("listed name %d is empty", k)
		}
		var err error
		if names[k].Name, err = str(nr.NameOff, n, "listed name", k); err != nil {
			return nil, err
		}
		if nr.Type == 0 || int(nr.Type) >= len(codeTypes) || (nr.Type > 3 && nr.Type != 6) || nr.Reserved != 0 {
			return nil, fmt.Errorf("listed name %s has unknown type code %d", quote(names[k].Name), nr.Type)
		}
		names[k].Type, names[k].Ino = codeTypes[nr.Type], nr.Ino
	}
	if cursor != uint64(len(strs)) {
		return nil, fmt.Errorf("string area holds %d bytes, the strings %d (corrupt image)", len(strs), cursor)
	}
	if err := d.decodeDots(h, body, l); err != nil {
		return nil, err
	}
	if err := d.decodeObjects(h, body, l); err != nil {
		return nil, err
	}
	return d, nil
}

// decodeDots reads the dots records, one per directory in load order, and
// checks that "." and ".." are two positions of the directory's read (its
// listing's names and both dots). The Go view keeps positions only where
// they are not the default 0 and 1, in one array for all directories.
func (d *decodedTOC) decodeDots(h *tocHeader, body []byte, l layout) error {
	var r tocDotsRec
	moved := 0 // directories whose dots are not first
	for k := uint64(0); k < uint64(h.ByType[1]); k++ {
		r.get(body[l.dots+dotsRecSize*k:])
		if r.Dot != 0 || r.DotDot != 1 {
			moved++
		}
	}
	positions := make([]int, 0, 2*moved)
	k := uint64(0)
	for i := range d.Entries {
		e := &d.Entries[i]
		if e.Type != TypeDir {
			continue
		}
		r.get(body[l.dots+dotsRecSize*k:])
		k++
		dot, dotdot, n := uint64(r.Dot), uint64(r.DotDot), uint64(len(e.Listing))+2
		if dot == dotdot || dot >= n || dotdot >= n {
			return fmt.Errorf("entry %d (%s): . at %d and .. at %d are not two positions of a read of %d names and . and .. (corrupt image)", i, quote(e.Path), dot, dotdot, len(e.Listing))
		}
		e.DotDotIno = r.DotDotIno
		if dot != 0 || dotdot != 1 {
			positions = append(positions, int(dot), int(dotdot))
			e.Dots = positions[len(positions)-2 : len(positions) : len(positions)]
		}
	}
	return nil
}

// decodeObjects reads the object and frame records, gives every regular
// entry its frames and digests, and checks that objects own consecutive runs
// of frames, frames follow each other in the file inside the data, and
// objects are in the order of their first references.
func (d *decodedTOC) decodeObjects(h *tocHeader, body []byte, l layout) error {
	frames := make([]Frame, h.Frames)
	var end int64 // end of the previous frame in the file
	var fr tocFrameRec
	for k := range frames {
		fr.get(body[l.frames+frameRecSize*uint64(k):])
		f := Frame{Offset: int64(fr.Offset), CSize: int64(fr.CSize), USize: int64(fr.USize)}
		// Offset+CSize must not overflow: a frame at 2^63-8 would otherwise
		// "end" before the data end.
		if f.Offset < 0 || f.CSize < 1 || f.CSize > maxFrameCSize || f.USize > maxFrameContent || f.Offset > d.DataEnd-f.CSize {
			return fmt.Errorf("frame %d (off %d csize %d usize %d) out of range: frames lie inside the data (ends at %d) and hold at most %d bytes of content each (corrupt or hostile image)",
				k, f.Offset, f.CSize, f.USize, d.DataEnd, maxFrameContent)
		}
		if f.Offset < end {
			return fmt.Errorf("frame %d at offset %d overlaps the previous frame, which ends at %d (frames of objects overlap or are out of file order; corrupt or hostile image)", k, f.Offset, end)
		}
		// A zstd block decodes to at most 128 KiB and takes at least 4 bytes
		// (an RLE block): no frame expands more than 32768 times. A TOC that
		// says otherwise declares content the frames cannot hold, to make
		// staging reserve (or a reader expect) what the image is not.
		if f.USize > f.CSize*maxFrameRatio {
			return fmt.Errorf("frame %d declares %d bytes from %d compressed (a ratio over %d, which zstd cannot reach; corrupt or hostile image)", k, f.USize, f.CSize, maxFrameRatio)
		}
		frames[k], end = f, f.Offset+f.CSize
	}
	// The digests of all objects as hex, in one allocation.
	hexes := make([]byte, 128*int(h.Objects))
	d.objOwner = make([]int, h.Objects)
	sizes := make([]int64, h.Objects)
	var next uint32
	var content uint64
	var r tocObjectRec
	for o := range d.objOwner {
		r.get(body[l.objects+objectRecSize*uint64(o):])
		first, count, size := r.FirstFrame, r.Frames, r.Size
		if first != next || count == 0 || uint64(count) > uint64(h.Frames)-uint64(first) {
			return fmt.Errorf("object %d at frames %d+%d, expected at %d of %d (objects overlap or leave frames out; corrupt image)", o, first, count, next, h.Frames)
		}
		next += count
		hex.Encode(hexes[128*o:], r.SHA256[:])
		hex.Encode(hexes[128*o+64:], r.FramesSHA256[:])
		if size == 0 || size > maxCpioSize {
			return fmt.Errorf("object %d: size %d out of range", o, size)
		}
		var sum int64
		fs := frames[first : first+count : first+count]
		for k, f := range fs {
			if k > 0 && f.Offset != fs[k-1].Offset+fs[k-1].CSize {
				return fmt.Errorf("object %d: frame %d at %d does not follow the previous frame (ends at %d)", o, k, f.Offset, fs[k-1].Offset+fs[k-1].CSize)
			}
			if k > 0 && f.USize == 0 {
				return fmt.Errorf("object %d: frame %d holds no content", o, k)
			}
			sum += f.USize
		}
		if uint64(sum) != size {
			return fmt.Errorf("object %d: frames hold %d bytes, size is %d", o, sum, size)
		}
		sizes[o], d.objOwner[o] = int64(size), -1
		content += size
	}
	if next != h.Frames || content != h.ContentBytes {
		return fmt.Errorf("objects hold %d frames and %d bytes, the header declares %d and %d (corrupt image)", next, content, h.Frames, h.ContentBytes)
	}
	allHex := string(hexes)
	objFrames := func(o uint32) []Frame {
		r.get(body[l.objects+objectRecSize*uint64(o):])
		return frames[r.FirstFrame : r.FirstFrame+r.Frames : r.FirstFrame+r.Frames]
	}
	prev := -1 // the last object referenced for the first time
	for i := range d.Entries {
		e := &d.Entries[i]
		if e.Type != TypeRegular {
			continue
		}
		o := d.objOf[i]
		if o == noObject {
			if e.Size != 0 {
				return fmt.Errorf("entry %d (%s): %d bytes of content but no object", i, quote(e.Path), e.Size)
			}
			e.SHA256 = emptySHA256
			continue
		}
		if e.Size != sizes[o] {
			return fmt.Errorf("entry %d (%s): size %d, its object holds %d", i, quote(e.Path), e.Size, sizes[o])
		}
		if d.objOwner[o] < 0 {
			if int(o) != prev+1 {
				return fmt.Errorf("entry %d (%s): object %d is referenced before object %d (objects must be in load order; corrupt image)", i, quote(e.Path), o, prev+1)
			}
			d.objOwner[o], prev = i, int(o)
		}
		e.Frames = objFrames(o)
		e.SHA256, e.FramesSHA256 = allHex[128*o:128*o+64], allHex[128*o+64:128*o+128]
	}
	if prev+1 != int(h.Objects) {
		return fmt.Errorf("object %d is referenced by no entry (corrupt image)", prev+1)
	}
	return nil
}

// emptySHA256 is the digest of no content (empty regular files).
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

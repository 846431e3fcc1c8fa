package image

import (
	"fmt"

	"github.com/dlbundle/dlbundle/internal/binrec"
)

// Format constants; see docs/SPEC.md section 1.
const (
	FormatName    = "dlbundle-image"
	FormatVersion = 2

	imageMagic = "DLBUNDLE"

	// Skippable frame magics (0x184D2A50 + id): the TOC and the footer.
	tocFrameMagic    = 0x184D2A5E
	footerFrameMagic = 0x184D2A5F

	skippableHeaderSize = 8
	footerPayloadSize   = 64
	footerSize          = skippableHeaderSize + footerPayloadSize

	// maxFrameContent is how much file content the writer puts in one frame
	// (large objects are split so that staging decompresses them in
	// parallel), and, since version 2, the most a reader accepts: a decode
	// buffer per worker is then at most this (plus a header), which keeps
	// decoding within its memory budget (decodeBudget).
	maxFrameContent = 4 << 20
	// maxFrameCSize bounds a frame's compressed size: zstd's worst case for
	// 4 MiB plus a header is a little over 4 MiB.
	maxFrameCSize = 8 << 20
	// maxCpioSize is the newc limit on a member's size (32-bit field).
	maxCpioSize = 1<<32 - 1
	// MaxPathLen is the longest path an image holds (docs/SPEC.md 1.3): the
	// staged copy is the stage directory followed by the path and must stay
	// under PATH_MAX (4096); 1 KiB is left for the stage directory's name.
	MaxPathLen = 3072
	// maxTargetLen is the longest symlink target (PATH_MAX without the NUL).
	maxTargetLen = 4095
	// maxNameLen is the longest listed name (NAME_MAX).
	maxNameLen = 255
)

// footer is the fixed-size last frame of an image.
type footer struct {
	Version   uint32
	Flags     uint32
	TOCOffset int64
	TOCLength int64
	TOCSHA256 [32]byte
}

// skippableRec is a zstd skippable frame's header (docs/SPEC.md 1.1).
type skippableRec struct {
	Magic uint32 // tocFrameMagic, footerFrameMagic
	Size  uint32 // of the payload that follows
}

func (r *skippableRec) put(b []byte) {
	w := binrec.W{B: b}
	w.U32(r.Magic)
	w.U32(r.Size)
}

func (r *skippableRec) get(b []byte) {
	g := binrec.R{B: b}
	r.Magic = g.U32()
	r.Size = g.U32()
}

// footerRec is the footer frame as stored (footerSize bytes): its skippable
// header, then the payload.
type footerRec struct {
	Frame     skippableRec
	Magic     [8]byte // imageMagic
	Version   uint32
	Flags     uint32
	TOCOffset uint64
	TOCLength uint64
	TOCSHA256 [32]byte
}

func (r *footerRec) put(b []byte) {
	r.Frame.put(b)
	w := binrec.W{B: b[skippableHeaderSize:]}
	w.Bytes(r.Magic[:])
	w.U32(r.Version)
	w.U32(r.Flags)
	w.U64(r.TOCOffset)
	w.U64(r.TOCLength)
	w.Bytes(r.TOCSHA256[:])
}

func (r *footerRec) get(b []byte) {
	r.Frame.get(b)
	g := binrec.R{B: b[skippableHeaderSize:]}
	g.Bytes(r.Magic[:])
	r.Version = g.U32()
	r.Flags = g.U32()
	r.TOCOffset = g.U64()
	r.TOCLength = g.U64()
	g.Bytes(r.TOCSHA256[:])
}

func skippableHeader(magic uint32, size int) []byte {
	b := make([]byte, skippableHeaderSize, skippableHeaderSize+size)
	h := skippableRec{Magic: magic, Size: uint32(size)}
	h.put(b)
	return b
}

func (f footer) marshal() []byte {
	r := footerRec{Frame: skippableRec{footerFrameMagic, footerPayloadSize}, Version: f.Version, Flags: f.Flags,
		TOCOffset: uint64(f.TOCOffset), TOCLength: uint64(f.TOCLength), TOCSHA256: f.TOCSHA256}
	copy(r.Magic[:], imageMagic)
	b := make([]byte, footerSize)
	r.put(b)
	return b
}

// parseFooter checks the last footerSize bytes of an image of fileSize bytes.
func parseFooter(b []byte, fileSize int64) (footer, error) {
	var f footer
	var r footerRec
	if len(b) == footerSize {
		r.get(b)
	}
	if len(b) != footerSize || r.Frame.Magic != footerFrameMagic || r.Frame.Size != footerPayloadSize ||
		string(r.Magic[:]) != imageMagic {
		return f, fmt.Errorf("not a dlbundle image (no %s footer in the last %d bytes; truncated or another file?)", imageMagic, footerSize)
	}
	f.Version, f.Flags, f.TOCSHA256 = r.Version, r.Flags, r.TOCSHA256
	off, length := r.TOCOffset, r.TOCLength
	if f.Version == 1 {
		// Version 1's JSON TOC cannot be bounded before it is parsed
		// (docs/SPEC.md 4): refused rather than read by a second parser.
		return f, fmt.Errorf("image format version 1: rebuild with dlbundle build (this dlbundle reads version %d, whose table of contents declares its size before it is read)", FormatVersion)
	}
	if f.Version != FormatVersion {
		return f, fmt.Errorf("image format version %d, this dlbundle reads version %d; use a matching dlbundle or rebuild the image", f.Version, FormatVersion)
	}
	if f.Flags != 0 {
		return f, fmt.Errorf("image footer has unknown flags %#x (version %d has none); corrupt image or newer writer", f.Flags, f.Version)
	}
	tocEnd := uint64(fileSize - footerSize)
	if length < skippableHeaderSize+tocHeaderSize+1 || length > maxTOCFrame || off > tocEnd || length != tocEnd-off {
		return f, fmt.Errorf("image footer points at a table of contents at %d+%d, but it must end at %d where the footer starts (truncated or corrupt image)", off, length, tocEnd)
	}
	f.TOCOffset, f.TOCLength = int64(off), int64(length)
	return f, nil
}

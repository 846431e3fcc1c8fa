package image

import (
	"encoding/binary"
	"fmt"
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

func skippableHeader(magic uint32, size int) []byte {
	b := make([]byte, skippableHeaderSize, skippableHeaderSize+size)
	binary.LittleEndian.PutUint32(b[0:], magic)
	binary.LittleEndian.PutUint32(b[4:], uint32(size))
	return b
}

func (f footer) marshal() []byte {
	b := skippableHeader(footerFrameMagic, footerPayloadSize)
	b = b[:footerSize]
	p := b[skippableHeaderSize:]
	copy(p[0:8], imageMagic)
	binary.LittleEndian.PutUint32(p[8:], f.Version)
	binary.LittleEndian.PutUint32(p[12:], f.Flags)
	binary.LittleEndian.PutUint64(p[16:], uint64(f.TOCOffset))
	binary.LittleEndian.PutUint64(p[24:], uint64(f.TOCLength))
	copy(p[32:64], f.TOCSHA256[:])
	return b
}

// parseFooter checks the last footerSize bytes of an image of fileSize bytes.
func parseFooter(b []byte, fileSize int64) (footer, error) {
	var f footer
	if len(b) != footerSize ||
		binary.LittleEndian.Uint32(b[0:]) != footerFrameMagic ||
		binary.LittleEndian.Uint32(b[4:]) != footerPayloadSize ||
		string(b[8:16]) != imageMagic {
		return f, fmt.Errorf("not a dlbundle image (no %s footer in the last %d bytes; truncated or another file?)", imageMagic, footerSize)
	}
	p := b[skippableHeaderSize:]
	f.Version = binary.LittleEndian.Uint32(p[8:])
	f.Flags = binary.LittleEndian.Uint32(p[12:])
	off, length := binary.LittleEndian.Uint64(p[16:]), binary.LittleEndian.Uint64(p[24:])
	copy(f.TOCSHA256[:], p[32:64])
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

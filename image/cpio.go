package image

import (
	"bytes"
	"fmt"
	"math"
	"strings"

	"github.com/u-root/u-root/pkg/cpio"
)

// cpio newc helpers: member names, headers and their sizes.

const (
	newcHeaderLen = 110 // "070701" + 13 fields of 8 hex digits
	sIFMT         = 0o170000
	sIFREG        = 0o100000
	sIFDIR        = 0o040000
	sIFLNK        = 0o120000
)

func round4(n int64) int64 { return (n + 3) &^ 3 }

// memberName is the cpio name of an image path: relative, "usr/lib/x.so".
func memberName(p string) string { return strings.TrimPrefix(p, "/") }

// headerLen is the size of a newc header with its name and padding.
func headerLen(name string) int64 { return round4(newcHeaderLen + int64(len(name)) + 1) }

// typeBits is the st_mode file type of an entry type.
func typeBits(t Type) uint32 {
	switch t {
	case TypeRegular:
		return sIFREG
	case TypeDir:
		return sIFDIR
	case TypeSymlink:
		return sIFLNK
	}
	return 0
}

// cpioInfo is the newc header of entry e. ino and nlink are assigned by the
// writer (reproducible numbering, hard-link sets for shared content).
func cpioInfo(e *Entry, ino, nlink uint64, size int64) cpio.Info {
	perm := uint64(e.Mode & 0o7777)
	if e.Mode&0o7777 == 0 {
		switch e.Type {
		case TypeDir:
			perm = 0o755
		case TypeSymlink:
			perm = 0o777
		default:
			perm = 0o644
		}
	}
	mtime := e.MtimeNS / 1e9
	if mtime < 0 {
		mtime = 0
	} else if mtime > math.MaxUint32 {
		mtime = math.MaxUint32
	}
	return cpio.Info{
		Ino:      ino,
		Mode:     uint64(typeBits(e.Type)) | perm,
		UID:      uint64(e.UID),
		GID:      uint64(e.GID),
		NLink:    nlink,
		MTime:    uint64(mtime),
		FileSize: uint64(size),
		Name:     memberName(e.Path),
	}
}

// cpioHeader returns the newc header (with name and padding) of a member of
// info.FileSize bytes; the caller appends the content and the padding.
// u-root's writer always copies the content itself (allocating a 32 KiB copy
// buffer per member, 40% of the writer's allocations), and the writer cuts
// content into frames, so the header is formatted here, in the exact layout
// u-root and GNU cpio write (TestCpioHeaderMatchesURoot checks).
func cpioHeader(info cpio.Info) []byte {
	name := info.Name
	b := make([]byte, 0, headerLen(name))
	b = append(b, "070701"...)
	for _, v := range []uint64{info.Ino, info.Mode, info.UID, info.GID, info.NLink, info.MTime, info.FileSize,
		info.Major, info.Minor, info.Rmajor, info.Rminor, uint64(len(name)) + 1, 0} {
		b = fmt.Appendf(b, "%08X", uint32(v))
	}
	b = append(b, name...)
	return append(b, make([]byte, headerLen(name)-int64(len(b)))...) // NUL and padding
}

// metaMember is a complete member without frames of its own (directory,
// symlink, empty file, later name of a hard-link set).
func metaMember(info cpio.Info, data []byte) ([]byte, error) {
	var buf bytes.Buffer
	w := cpio.Newc.Writer(&buf)
	rec := cpio.Record{Info: info}
	if len(data) > 0 {
		rec.ReaderAt = bytes.NewReader(data)
		rec.Info.FileSize = uint64(len(data))
	} else {
		rec.Info.FileSize = 0
	}
	if err := w.WriteRecord(rec); err != nil {
		return nil, fmt.Errorf("cpio member %s: %w", quote(info.Name), err)
	}
	return buf.Bytes(), nil
}

// trailer is the TRAILER!!! member that ends the archive.
func trailer() ([]byte, error) {
	var buf bytes.Buffer
	if err := cpio.WriteTrailer(cpio.Newc.Writer(&buf)); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// parseRegularHeader checks that b starts with the newc header of a regular
// file named name holding size bytes, and returns the header length.
func parseRegularHeader(b []byte, name string, size int64) (int64, error) {
	hl := headerLen(name)
	if int64(len(b)) < hl {
		return 0, fmt.Errorf("first frame too short for the cpio header of %s", quote(name))
	}
	rec, err := cpio.Newc.Reader(bytes.NewReader(b[:hl])).ReadRecord()
	if err != nil {
		return 0, fmt.Errorf("cpio header of %s: %v", quote(name), err)
	}
	if rec.Name != name || rec.FilePos != hl {
		return 0, fmt.Errorf("cpio header names %q, the table of contents %q", rec.Name, quote(name))
	}
	if rec.Mode&sIFMT != sIFREG || int64(rec.FileSize) != size {
		return 0, fmt.Errorf("cpio header of %s: mode %#o size %d, want a regular file of %d bytes", quote(name), rec.Mode, rec.FileSize, size)
	}
	return hl, nil
}

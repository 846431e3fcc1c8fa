// Package dirent decodes the records getdents64(2) fills a buffer with
// (struct linux_dirent64: u64 d_ino, s64 d_off, u16 d_reclen, u8 d_type,
// the NUL-terminated name, padding). The buffer may come from another
// process (the tracer reads the tracee's), so every length is checked. It
// is the one decoder of those records for the build (squash) and the
// tracer; it owns nothing else.
package dirent

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// HeaderLen is the fixed part of a record: d_ino, d_off, d_reclen, d_type.
const HeaderLen = 19

// Record is one name of a directory read.
type Record struct {
	Ino  uint64
	Type uint8  // d_type (DT_REG, DT_DIR, DT_LNK, DT_UNKNOWN...)
	Name []byte // a view of the buffer, without its NUL
}

// Next decodes the record at the start of buf (the part of the buffer that
// getdents64 filled and the caller has not read yet) and returns it and the
// records after it. A record whose length is too short for a name or runs
// past buf is an error: the kernel writes neither.
func Next(buf []byte) (rec Record, rest []byte, err error) {
	if len(buf) < HeaderLen {
		return rec, nil, fmt.Errorf("getdents: %d bytes left, a record's header needs %d", len(buf), HeaderLen)
	}
	reclen := int(binary.NativeEndian.Uint16(buf[16:]))
	if reclen < HeaderLen+1 || reclen > len(buf) {
		return rec, nil, fmt.Errorf("getdents: bad record length %d (%d bytes left)", reclen, len(buf))
	}
	name := buf[HeaderLen:reclen]
	if k := bytes.IndexByte(name, 0); k >= 0 {
		name = name[:k]
	}
	return Record{Ino: binary.NativeEndian.Uint64(buf), Type: buf[18], Name: name}, buf[reclen:], nil
}

package trace

import (
	"encoding/binary"
	"fmt"
)

// Linux d_type values (dirent.h).
const (
	dtUnknown = 0
	dtDir     = 4
	dtReg     = 8
	dtLnk     = 10
)

// parseDirents decodes a buffer filled by getdents64 (struct linux_dirent64:
// u64 ino, s64 off, u16 reclen, u8 type, NUL-terminated name, padding) and
// appends its names to out, leaving out "." and "..". The buffer comes from
// another process, so every length is checked.
func parseDirents(buf []byte, out []DirEntry) ([]DirEntry, error) {
	const hdr = 19 // ino + off + reclen + type
	for off := 0; off < len(buf); {
		if len(buf)-off < hdr {
			return out, fmt.Errorf("dirent at %d: %d bytes left, header needs %d", off, len(buf)-off, hdr)
		}
		reclen := int(binary.LittleEndian.Uint16(buf[off+16:]))
		if reclen < hdr+1 || reclen > len(buf)-off {
			return out, fmt.Errorf("dirent at %d: bad record length %d", off, reclen)
		}
		rec := buf[off : off+reclen]
		name := rec[hdr:]
		for i, c := range name {
			if c == 0 {
				name = name[:i]
				break
			}
		}
		if s := string(name); s != "." && s != ".." {
			out = append(out, DirEntry{Name: s, Type: direntType(rec[18])})
		}
		off += reclen
	}
	return out, nil
}

func direntType(t byte) string {
	switch t {
	case dtReg:
		return "reg"
	case dtDir:
		return "dir"
	case dtLnk:
		return "symlink"
	case dtUnknown:
		return "" // the file system does not say: the tracer asks lstat
	}
	return "other"
}

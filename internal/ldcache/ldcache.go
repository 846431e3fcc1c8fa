package ldcache

import (
	"bytes"
	"encoding/binary"
	"runtime"
)

// File is the cache ld.so reads.
const File = "/etc/ld.so.cache"

const (
	Magic     = "glibc-ld.so.cache1.1"
	HeaderLen = 48
	EntryLen  = 24
)

// Flags: the flags ld.so accepts (_dl_cache_check_flags), 0 where
// the shim knows none (it then never predicts the cache).
func Flags() int32 {
	switch runtime.GOARCH {
	case "amd64":
		return 0x0303 // FLAG_ELF_LIBC6 | FLAG_X8664_LIB64
	case "arm64":
		return 0x0a03 // FLAG_ELF_LIBC6 | FLAG_AARCH64_LIB64
	}
	return 0
}

// Lookup answers name from the cache file b as audit.so's
// dlb_ldcache_lookup does: 1 and the path when the cache names one file,
// 0 when it names none, -1 when the answer is not the shim's to predict (an
// entry with hwcaps, a string off the end of the file, no flags known for
// this architecture). ok is false when b is not a cache the shim reads
// (dlb_ldcache_open).
func Lookup(b []byte, name string) (ok bool, rc int, file string) {
	off, n, ok := Open(b)
	if !ok {
		return false, 0, ""
	}
	flags := Flags()
	if flags == 0 {
		return true, -1, ""
	}
	entry := func(i int64) []byte { return Entry(b, off, int(i)) }
	str := func(o uint32) (string, bool) { return Str(b, off, o) }
	bad := false
	cmp := func(i int64) int {
		key, ok := str(binary.LittleEndian.Uint32(entry(i)[4:]))
		if !ok {
			bad = true
			return 0
		}
		return libcmp(name, key)
	}
	left, right := int64(0), int64(n)-1
	for left <= right {
		mid := (left + right) / 2
		c := cmp(mid)
		if bad {
			return true, -1, ""
		}
		// ldconfig sorts in descending order: a name below the key lies
		// further on
		if c < 0 {
			left = mid + 1
			continue
		}
		if c > 0 {
			right = mid - 1
			continue
		}
		// Found: back up to the run's first entry, then read it to its
		// end, no further than right, as search_cache does.
		i := mid
		for i > 0 && cmp(i-1) == 0 && !bad {
			i--
		}
		if bad {
			return true, -1, ""
		}
		first, found := "", false
		for ; i <= right; i++ {
			if i > mid && (cmp(i) != 0 || bad) {
				break
			}
			e := entry(i)
			if binary.LittleEndian.Uint64(e[16:]) != 0 {
				return true, -1, ""
			}
			if int32(binary.LittleEndian.Uint32(e)) != flags || found {
				continue
			}
			s, ok := str(binary.LittleEndian.Uint32(e[8:]))
			if !ok {
				return true, -1, ""
			}
			first, found = s, true
		}
		if bad {
			return true, -1, ""
		}
		if found {
			return true, 1, first
		}
		return true, 0, ""
	}
	return true, 0, ""
}

// libcmp is _dl_cache_libcmp (and ldcache.h's): bytes compare as
// bytes, except that runs of digits compare as numbers, in the C code's
// unsigned int arithmetic, converted to int as it returns.
func libcmp(p1, p2 string) int {
	i, j := 0, 0
	at := func(s string, k int) byte {
		if k < len(s) {
			return s[k]
		}
		return 0
	}
	digit := func(c byte) bool { return c >= '0' && c <= '9' }
	for at(p1, i) != 0 {
		c1, c2 := at(p1, i), at(p2, j)
		switch {
		case digit(c1):
			if !digit(c2) {
				return 1
			}
			v1, v2 := uint32(c1-'0'), uint32(c2-'0')
			i, j = i+1, j+1
			for digit(at(p1, i)) {
				v1 = v1*10 + uint32(at(p1, i)-'0')
				i++
			}
			for digit(at(p2, j)) {
				v2 = v2*10 + uint32(at(p2, j)-'0')
				j++
			}
			if v1 != v2 {
				return int(int32(v1 - v2))
			}
		case digit(c2):
			return -1
		case c1 != c2:
			return char(c1) - char(c2)
		default:
			i, j = i+1, j+1
		}
	}
	return char(at(p1, i)) - char(at(p2, j))
}

// char is byte c as C's char holds it: signed on x86 (a byte of 0x80 or
// more compares below "a"), unsigned on aarch64. ld.so's and the shim's
// libcmp subtract chars, so a name with such bytes sorts as they sort it.
func char(c byte) int {
	if signedChar {
		return int(int8(c))
	}
	return int(c)
}

const signedChar = runtime.GOARCH == "amd64" || runtime.GOARCH == "386"

// Open finds the new format's table in the file b: the offset of its header
// (its string offsets count from there) and its number of entries, every
// one inside the file; ok is false for a file ld.so would not take.
func Open(b []byte) (off, n int, ok bool) {
	if len(b) >= 16 && bytes.HasPrefix(b, []byte("ld.so-1.7.0")) {
		old := uint64(binary.LittleEndian.Uint32(b[12:]))
		off64 := (16 + old*12 + 7) &^ 7 // the old entries, then the new header, 8-aligned
		if off64 > uint64(len(b)) {
			return 0, 0, false
		}
		off = int(off64)
	}
	if len(b) < HeaderLen || off > len(b)-HeaderLen || !bytes.HasPrefix(b[off:], []byte(Magic)) {
		return 0, 0, false
	}
	n64 := uint64(binary.LittleEndian.Uint32(b[off+20:]))
	if n64 > uint64(len(b)-off-HeaderLen)/EntryLen {
		return 0, 0, false
	}
	return off, int(n64), true
}

// Entry is entry i (flags, key, value, osversion, hwcap) of the table at off.
func Entry(b []byte, off, i int) []byte { return b[off+HeaderLen+i*EntryLen:][:EntryLen] }

// Str is the NUL-terminated string at o (from the header at off), or false
// when it runs off the file (ld.so trusts the NUL; this reads no further
// than the file).
func Str(b []byte, off int, o uint32) (string, bool) {
	at := uint64(off) + uint64(o)
	if at >= uint64(len(b)) {
		return "", false
	}
	end := bytes.IndexByte(b[at:], 0)
	if end < 0 {
		return "", false
	}
	return string(b[at : at+uint64(end)]), true
}

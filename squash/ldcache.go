package squash

import (
	"bytes"
	"encoding/binary"
	"os"
	"runtime"
)

// ldCache is /etc/ld.so.cache as this node's ld.so reads it (glibc
// elf/dl-cache.c; the shim's C reader is loader/shim/ldcache.h): the new
// format ("glibc-ld.so.cache1.1"), alone or after the old one. For each
// name, the first entry of this architecture's flags without hwcaps, in
// the file's order: the entry ld.so's binary search settles on.
type ldCache map[string]string

const (
	ldCacheMagic  = "glibc-ld.so.cache1.1"
	ldCacheHeader = 48
	ldCacheEntry  = 24
)

// ldCacheFlags: the flags ld.so accepts (_dl_cache_check_flags), 0 where
// unknown (no answer from the cache: the default directories decide).
func ldCacheFlags() int32 {
	switch runtime.GOARCH {
	case "amd64":
		return 0x0303 // FLAG_ELF_LIBC6 | FLAG_X8664_LIB64
	case "arm64":
		return 0x0a03 // FLAG_ELF_LIBC6 | FLAG_AARCH64_LIB64
	}
	return 0
}

// readLdCache reads the cache at name; an absent or unreadable one is
// empty (ld.so then goes on to the default directories).
func readLdCache(name string) ldCache {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil
	}
	return parseLdCache(b, ldCacheFlags())
}

func parseLdCache(b []byte, flags int32) ldCache {
	off := 0
	if len(b) >= 16 && bytes.HasPrefix(b, []byte("ld.so-1.7.0")) {
		n := int(binary.LittleEndian.Uint32(b[12:]))
		off = (16 + n*12 + 7) &^ 7 // the old entries, then the new header, 8-aligned
	}
	if off < 0 || off+ldCacheHeader > len(b) || !bytes.HasPrefix(b[off:], []byte(ldCacheMagic)) {
		return nil
	}
	n := int(binary.LittleEndian.Uint32(b[off+20:]))
	if n < 0 || n > (len(b)-off-ldCacheHeader)/ldCacheEntry {
		return nil
	}
	str := func(o uint32) (string, bool) {
		at := off + int(o)
		if at < off || at >= len(b) {
			return "", false
		}
		end := bytes.IndexByte(b[at:], 0)
		if end < 0 {
			return "", false
		}
		return string(b[at : at+end]), true
	}
	c := ldCache{}
	for i := 0; i < n; i++ {
		e := b[off+ldCacheHeader+i*ldCacheEntry:]
		if int32(binary.LittleEndian.Uint32(e)) != flags || binary.LittleEndian.Uint64(e[16:]) != 0 {
			continue
		}
		k, ok1 := str(binary.LittleEndian.Uint32(e[4:]))
		v, ok2 := str(binary.LittleEndian.Uint32(e[8:]))
		if !ok1 || !ok2 {
			continue
		}
		if _, had := c[k]; !had {
			c[k] = v
		}
	}
	return c
}

// NodeCacheLookup returns a function that answers, for a library file name,
// the path this node's /etc/ld.so.cache gives it ("" when none), reading the
// cache once, at its first call.
func NodeCacheLookup() func(name string) string {
	var c ldCache
	read := false
	return func(name string) string {
		if !read {
			c, read = readLdCache("/etc/ld.so.cache"), true
		}
		return c[name]
	}
}

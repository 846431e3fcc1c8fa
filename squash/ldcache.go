package squash

import (
	"encoding/binary"
	"os"

	"github.com/dlbundle/dlbundle/internal/ldcache"
)

// ldCache is /etc/ld.so.cache as this node's ld.so reads it
// (internal/ldcache). For each
// name, the first entry of this architecture's flags without hwcaps, in
// the file's order: the entry ld.so's binary search settles on.
type ldCache map[string]string

// readLdCache reads the cache at name; an absent or unreadable one is
// empty (ld.so then goes on to the default directories).
func readLdCache(name string) ldCache {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil
	}
	return parseLdCache(b, ldcache.Flags())
}

func parseLdCache(b []byte, flags int32) ldCache {
	off, n, ok := ldcache.Open(b)
	if !ok {
		return nil
	}
	c := ldCache{}
	for i := 0; i < n; i++ {
		e := ldcache.Entry(b, off, i)
		if int32(binary.LittleEndian.Uint32(e)) != flags || binary.LittleEndian.Uint64(e[16:]) != 0 {
			continue
		}
		k, ok1 := ldcache.Str(b, off, binary.LittleEndian.Uint32(e[4:]))
		v, ok2 := ldcache.Str(b, off, binary.LittleEndian.Uint32(e[8:]))
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
			c, read = readLdCache(ldcache.File), true
		}
		return c[name]
	}
}

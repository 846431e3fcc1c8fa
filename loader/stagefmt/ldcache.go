package stagefmt

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/image"
)

// The node's /etc/ld.so.cache answers, computed at staging for the names the
// image holds and written into the table's room after the search rules
// (WriteSearch): audit.so's search then reads no cache in a process whose
// libraries are all among them (an open, fstat, mmap, close, munmap and a
// page fault of the cache, every process), only one stat that says the
// cache is still the one the answers came from. A name without an answer,
// or a cache that changed, is looked up in the cache itself, as before.
//
// The lookup is audit.so's (loader/shim/ldcache.h: ld.so's own binary
// search, glibc elf/dl-cache.c), written again here; the cgo tests in
// loader/shim/fuzz hold the two to each other on this machine's cache and
// on fuzzed ones.

const (
	ldCacheMagic  = "glibc-ld.so.cache1.1"
	ldCacheHeader = 48
	ldCacheEntry  = 24
)

// ldCacheFlags: the flags ld.so accepts (_dl_cache_check_flags), 0 where
// the shim knows none (it then never predicts the cache).
func ldCacheFlags() int32 {
	switch runtime.GOARCH {
	case "amd64":
		return 0x0303 // FLAG_ELF_LIBC6 | FLAG_X8664_LIB64
	case "arm64":
		return 0x0a03 // FLAG_ELF_LIBC6 | FLAG_AARCH64_LIB64
	}
	return 0
}

// LdCacheLookup answers name from the cache file b as audit.so's
// dlb_ldcache_lookup does: 1 and the path when the cache names one file,
// 0 when it names none, -1 when the answer is not the shim's to predict (an
// entry with hwcaps, a string off the end of the file, no flags known for
// this architecture). ok is false when b is not a cache the shim reads
// (dlb_ldcache_open).
func LdCacheLookup(b []byte, name string) (ok bool, rc int, file string) {
	off := 0
	if len(b) >= 16 && bytes.HasPrefix(b, []byte("ld.so-1.7.0")) {
		n := uint64(binary.LittleEndian.Uint32(b[12:]))
		off64 := (16 + n*12 + 7) &^ 7 // the old entries, then the new header, 8-aligned
		if off64 > uint64(len(b)) {
			return false, 0, ""
		}
		off = int(off64)
	}
	if len(b) < ldCacheHeader || off > len(b)-ldCacheHeader || !bytes.HasPrefix(b[off:], []byte(ldCacheMagic)) {
		return false, 0, ""
	}
	n := uint64(binary.LittleEndian.Uint32(b[off+20:]))
	if n > uint64(len(b)-off-ldCacheHeader)/ldCacheEntry {
		return false, 0, ""
	}
	flags := ldCacheFlags()
	if flags == 0 {
		return true, -1, ""
	}
	entry := func(i int64) []byte { return b[off+ldCacheHeader+int(i)*ldCacheEntry:][:ldCacheEntry] }
	// str: the NUL-terminated string at o (from the new header), or false
	// when it runs off the file.
	str := func(o uint32) (string, bool) {
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
	bad := false
	cmp := func(i int64) int {
		key, ok := str(binary.LittleEndian.Uint32(entry(i)[4:]))
		if !ok {
			bad = true
			return 0
		}
		return ldCacheLibcmp(name, key)
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

// ldCacheLibcmp is _dl_cache_libcmp (and ldcache.h's): bytes compare as
// bytes, except that runs of digits compare as numbers, in the C code's
// unsigned int arithmetic, converted to int as it returns.
func ldCacheLibcmp(p1, p2 string) int {
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
			return int(c1) - int(c2)
		default:
			i, j = i+1, j+1
		}
	}
	return int(at(p1, i)) - int(at(p2, j))
}

// LdCacheFile is the cache ld.so reads.
const LdCacheFile = "/etc/ld.so.cache"

// maxCacheAnswerPath: a longer answer is left out (audit.so copies an
// answer into a buffer of this size on its stack).
const maxCacheAnswerPath = 255

// CacheAnswerNames are the names whose cache answers a stage keeps: the
// base names of the image's shared objects, their symlinks and the libraries
// the pilot found missing, in load order (the first loaded first: the
// room may not hold them all), each once.
func CacheAnswerNames(entries []image.Entry) []string {
	seen := map[string]bool{}
	var names []string
	for i := range entries {
		e := &entries[i]
		switch e.Type {
		case image.TypeRegular, image.TypeSymlink, image.TypeMissing:
		default:
			continue
		}
		n := path.Base(e.Path)
		if !strings.Contains(n, ".so") || seen[n] || !cacheNameOK(n) {
			continue
		}
		seen[n] = true
		names = append(names, n)
	}
	return names
}

// cacheNameOK: a name the room's line format can hold (audit.c splits a
// line at its spaces).
func cacheNameOK(n string) bool {
	return n != "" && len(n) <= 255 && !strings.ContainsAny(n, " \n\x00/")
}

// FormatCacheAnswers reads the node's cache and writes the room's cache
// section for names, at most max bytes: a "cache DEV INO SIZE MTIME_SEC
// MTIME_NSEC" line (what audit.so compares with its stat of the file), then
// "so NAME =PATH" (the cache names PATH), "so NAME -" (it names none) or
// "so NAME ?" (not the shim's to predict) per name, as many as fit. No
// cache, or one the shim does not read, gives no section: the shim then
// reads the file as before.
func FormatCacheAnswers(names []string, max int) []byte {
	f, err := os.Open(LdCacheFile)
	if err != nil {
		return nil
	}
	defer f.Close()
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size <= 0 || st.Size > 64<<20 {
		return nil
	}
	b := make([]byte, st.Size)
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil
	}
	return formatCacheAnswers(b, cacheIdentity(&st), names, max)
}

// cacheIdentity is the "cache" line's fields: what a new cache written by
// ldconfig (a new file, renamed over the old) changes.
func cacheIdentity(st *unix.Stat_t) string {
	return fmt.Sprintf("%d %d %d %d %d", uint64(st.Dev), st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec)
}

func formatCacheAnswers(b []byte, identity string, names []string, max int) []byte {
	if ok, _, _ := LdCacheLookup(b, ""); !ok {
		return nil
	}
	out := []byte("cache " + identity + "\n")
	if len(out) > max {
		return nil
	}
	for _, n := range names {
		if !cacheNameOK(n) {
			continue
		}
		_, rc, file := LdCacheLookup(b, n)
		var line string
		switch {
		case rc == 1 && (len(file) > maxCacheAnswerPath || file == "" || strings.ContainsAny(file, "\n\x00")):
			continue // no line: the shim reads the cache for it
		case rc == 1:
			line = "so " + n + " =" + file + "\n"
		case rc == 0:
			line = "so " + n + " -\n"
		default:
			line = "so " + n + " ?\n"
		}
		if len(out)+len(line) > max {
			break
		}
		out = append(out, line...)
	}
	return out
}

// checkCacheAnswers checks a cache section as audit.c's read_rules takes it:
// the "cache" line of five decimal numbers, then "so NAME ANSWER" lines,
// each ending with a newline.
func checkCacheAnswers(b []byte) error {
	if len(b) == 0 || b[len(b)-1] != '\n' {
		return fmt.Errorf("search rules: cache answers do not end with a newline")
	}
	lines := strings.Split(string(b[:len(b)-1]), "\n")
	f := strings.Fields(strings.TrimPrefix(lines[0], "cache "))
	if !strings.HasPrefix(lines[0], "cache ") || len(f) != 5 || strings.Join(f, " ") != lines[0][len("cache "):] {
		return fmt.Errorf("search rules: cache line %q", lines[0])
	}
	for _, x := range f {
		if strings.Trim(x, "0123456789") != "" {
			return fmt.Errorf("search rules: cache line %q", lines[0])
		}
	}
	for _, l := range lines[1:] {
		rest, ok := strings.CutPrefix(l, "so ")
		name, ans, ok2 := strings.Cut(rest, " ")
		switch {
		case !ok || !ok2 || !cacheNameOK(name):
			return fmt.Errorf("search rules: cache answer %q", l)
		case ans == "-" || ans == "?":
		case strings.HasPrefix(ans, "=/") && len(ans)-1 <= maxCacheAnswerPath:
		default:
			return fmt.Errorf("search rules: cache answer %q", l)
		}
	}
	return nil
}

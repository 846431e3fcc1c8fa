package stagefmt

import (
	"fmt"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/ldcache"
)

// The node's /etc/ld.so.cache answers, computed at staging for the names the
// image holds and written into the table's room after the search rules
// (WriteSearch): audit.so's search then reads no cache in a process whose
// libraries are all among them (an open, fstat, mmap, close, munmap and a
// page fault of the cache, every process), only one stat that says the
// cache is still the one the answers came from. A name without an answer,
// or a cache that changed, is looked up in the cache itself, as before.
// The lookup is audit.so's (internal/ldcache).

// maxCacheAnswerPath: a longer answer is left out (audit.so copies an
// answer into a buffer of this size on its stack).
const maxCacheAnswerPath = 255

// CacheAnswerNames are the names whose cache answers a stage keeps: the
// base names of the image's shared objects, their symlinks, the libraries
// the pilot found missing and those it loaded from the node (external
// entries: the node-bound driver libraries, libcuda...), in load order (the
// first loaded first: the room may not hold them all), each once. For a
// library from the node, audit.so's search still leaves the name to ld.so,
// which reads the cache itself: the answer spares the process audit.so's
// read of it before that (a map and an unmap each).
func CacheAnswerNames(entries []image.Entry) []string {
	seen := map[string]bool{}
	var names []string
	for i := range entries {
		e := &entries[i]
		switch e.Type {
		case image.TypeRegular, image.TypeSymlink, image.TypeMissing, image.TypeExternal:
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
	f, err := os.Open(ldcache.File)
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
	if _, _, ok := ldcache.Open(b); !ok {
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
		_, rc, file := ldcache.Lookup(b, n)
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

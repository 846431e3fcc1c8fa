package stagefmt

import (
	"encoding/binary"
	"os"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/ldcache"
)

// testCache builds a cache file in the new format from (key, value, hwcap)
// entries already in ldconfig's order (descending, by libcmp), all with
// this architecture's flags.
func testCache(t *testing.T, entries [][3]string) []byte {
	t.Helper()
	flags := ldcache.Flags()
	if flags == 0 {
		t.Skip("no ld.so.cache flags known for this architecture")
	}
	le := binary.LittleEndian
	strOff := ldcache.HeaderLen + ldcache.EntryLen*len(entries)
	var strs []byte
	add := func(s string) uint32 {
		o := strOff + len(strs)
		strs = append(append(strs, s...), 0)
		return uint32(o)
	}
	h := make([]byte, ldcache.HeaderLen)
	copy(h, ldcache.Magic)
	le.PutUint32(h[20:], uint32(len(entries)))
	ents := make([]byte, ldcache.EntryLen*len(entries))
	for i, e := range entries {
		b := ents[ldcache.EntryLen*i:]
		le.PutUint32(b[0:], uint32(flags))
		le.PutUint32(b[4:], add(e[0]))
		le.PutUint32(b[8:], add(e[1]))
		if e[2] != "" {
			le.PutUint64(b[16:], 1<<62)
		}
	}
	return append(append(h, ents...), strs...)
}

// The room's cache section: one answer per name in the order given (found,
// none, not ours to predict), what does not fit is left out, an answer too
// long for audit.so's buffer is left to the cache itself, and what is
// written is what audit.c's reader takes (CheckSearchRules).
func TestFormatCacheAnswers(t *testing.T) {
	long := "/lib/" + strings.Repeat("x", 300) + "/libl.so.1"
	cache := testCache(t, [][3]string{
		{"libz.so.1", "/lib/x86_64-linux-gnu/libz.so.1", ""},
		{"libl.so.1", long, ""},
		{"libh.so.1", "/lib/glibc-hwcaps/x86-64-v3/libh.so.1", "hwcap"},
		{"libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6", ""},
	})
	names := []string{"libc.so.6", "libz.so.1", "libnone.so.2", "libh.so.1", "libl.so.1"}
	got := string(formatCacheAnswers(cache, "1 2 3 4 5", names, 4096))
	want := "cache 1 2 3 4 5\n" +
		"so libc.so.6 =/lib/x86_64-linux-gnu/libc.so.6\n" +
		"so libz.so.1 =/lib/x86_64-linux-gnu/libz.so.1\n" +
		"so libnone.so.2 -\n" +
		"so libh.so.1 ?\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	rules, err := FormatSearchRules([]string{""}, []string{"/lib"})
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckSearchRules(append(rules, got...)); err != nil {
		t.Errorf("rules with the section: %v", err)
	}
	// room for the cache line and the first answer only
	if got := string(formatCacheAnswers(cache, "1 2 3 4 5", names, len("cache 1 2 3 4 5\n")+len("so libc.so.6 =/lib/x86_64-linux-gnu/libc.so.6\n")+3)); got != want[:strings.Index(want, "so libz")] {
		t.Errorf("a small room: got\n%s", got)
	}
	if got := formatCacheAnswers(cache, "1 2 3 4 5", names, 5); got != nil {
		t.Errorf("no room for the cache line: got %q", got)
	}
	if got := formatCacheAnswers([]byte("not a cache"), "1 2 3 4 5", names, 4096); got != nil {
		t.Errorf("a file that is no cache: got %q", got)
	}
	for _, bad := range []string{
		"cache 1 2 3 4\n",
		"cache 1 2 3 4 x\n",
		"cache 1 2 3 4 5\nso libc.so.6\n",
		"cache 1 2 3 4 5\nso libc.so.6 =lib/libc.so.6\n",
		"cache 1 2 3 4 5\nso a/b -\n",
		"cache 1 2 3 4 5\nso libc.so.6 +\n",
		"cache 1 2 3 4 5\nso libc.so.6 =" + long + "\n",
	} {
		if err := CheckSearchRules(append(rules, bad...)); err == nil {
			t.Errorf("CheckSearchRules took %q", bad)
		}
	}
}

// The names a stage keeps answers for: shared objects, their symlinks,
// missing libraries and libraries from the node (external entries) of the
// image, once each, in load order; no directories, no other files.
func TestCacheAnswerNames(t *testing.T) {
	es := []image.Entry{
		{Path: "/usr/lib/x86_64-linux-gnu", Type: image.TypeDir},
		{Path: "/usr/lib/x86_64-linux-gnu/libz.so.1", Type: image.TypeSymlink, Target: "libz.so.1.2.13"},
		{Path: "/usr/lib/x86_64-linux-gnu/libz.so.1.2.13", Type: image.TypeRegular},
		{Path: "/opt/app/lib/libz.so.1", Type: image.TypeRegular},
		{Path: "/usr/lib/x86_64-linux-gnu/libmissing.so.3", Type: image.TypeMissing},
		{Path: "/usr/bin/python3", Type: image.TypeRegular},
		{Path: "/usr/lib/x86_64-linux-gnu/libx.so", Type: image.TypeDir},
		{Path: "/usr/lib/x86_64-linux-gnu/lib sp.so.1", Type: image.TypeRegular},
		{Path: "/usr/lib/x86_64-linux-gnu/libcuda.so.1", Type: image.TypeExternal}, // the node's driver library
	}
	got := strings.Join(CacheAnswerNames(es), ",")
	if want := "libz.so.1,libz.so.1.2.13,libmissing.so.3,libcuda.so.1"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// On this machine's cache: an answer for libc.so.6, from the cache whose
// identity the section names.
func TestFormatCacheAnswersNodeCache(t *testing.T) {
	b, err := os.ReadFile(ldcache.File)
	if err != nil {
		t.Fatalf("this test reads the node's cache: %v", err)
	}
	if ok, _, _ := ldcache.Lookup(b, "libc.so.6"); !ok {
		t.Fatalf("%s is not in a format the shim reads", ldcache.File)
	}
	got := string(FormatCacheAnswers([]string{"libc.so.6"}, 4096))
	first, rest, _ := strings.Cut(got, "\n")
	if !strings.HasPrefix(first, "cache ") || !strings.HasPrefix(rest, "so libc.so.6 =/") {
		t.Errorf("got %q", got)
	}
}

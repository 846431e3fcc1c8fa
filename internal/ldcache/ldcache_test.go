package ldcache

import "testing"

// libcmp orders as glibc's _dl_cache_libcmp: runs of digits as numbers,
// everything else as bytes, a digit after anything else.
func TestLibcmp(t *testing.T) {
	for _, c := range []struct {
		a, b string
		sign int
	}{
		{"libz.so.9", "libz.so.10", -1},
		{"libz.so.10", "libz.so.9", 1},
		{"libz.so.1", "libz.so.1", 0},
		{"liba.so.1", "libb.so.1", -1},
		{"libz.so.1", "libz.so.a", 1},
		{"libz.so.a", "libz.so.1", -1},
		{"libz.so", "libz.so.1", -1},
		{"libz.so.007", "libz.so.7", 0},
		// a byte of 0x80 or more: C's char, signed on x86 (below 'a'),
		// unsigned on aarch64 (above)
		{"lib\xa9.so", "liba.so", map[bool]int{true: -1, false: 1}[signedChar]},
	} {
		got := libcmp(c.a, c.b)
		if (got < 0 && c.sign >= 0) || (got > 0 && c.sign <= 0) || (got == 0 && c.sign != 0) {
			t.Errorf("libcmp(%q, %q) = %d, want the sign of %d", c.a, c.b, got, c.sign)
		}
	}
}

// A file that is no cache is refused; an empty cache finds nothing.
func TestOpenAndLookupRefuse(t *testing.T) {
	if _, _, ok := Open([]byte("not a cache at all, long enough to read a header from it")); ok {
		t.Error("Open took a file that is no cache")
	}
	empty := make([]byte, HeaderLen)
	copy(empty, Magic)
	if ok, rc, _ := Lookup(empty, "libc.so.6"); !ok || (rc != 0 && Flags() != 0) {
		t.Errorf("an empty cache: ok %v rc %d, want true 0", ok, rc)
	}
}

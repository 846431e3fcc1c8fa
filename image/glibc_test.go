package image

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// The host's ld.so and libc, read as data, say what readelf and libc's own
// banner say.
func TestGlibcOfHostFiles(t *testing.T) {
	ldso, libc := "/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6"
	if _, err := os.Stat(ldso); err != nil {
		t.Skip("not an x86-64 Debian layout")
	}
	f, err := os.Open(ldso)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	id, err := BuildID(f)
	if err != nil || len(id) != 40 {
		t.Fatalf("BuildID(%s) = %q, %v", ldso, id, err)
	}
	out, err := exec.Command("readelf", "-n", ldso).Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "Build ID: "+id) {
		t.Errorf("readelf -n %s does not show build id %s:\n%s", ldso, id, out)
	}
	g, err := os.Open(libc)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	st, _ := g.Stat()
	v, k, err := LibcVersion(ioSizeReader{g, st.Size()})
	if err != nil {
		t.Fatal(err)
	}
	run, err := exec.Command(libc).Output() // the host's own libc, not an image's
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`release version ([0-9.]+[0-9])`).FindSubmatch(run); m == nil || string(m[1]) != v {
		t.Errorf("LibcVersion = %q, libc says %q", v, run)
	}
	if !regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`).MatchString(k) {
		t.Errorf("minimum kernel %q", k)
	}
	for _, n := range []string{"ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1", "ld-2.31.so"} {
		if !IsLdsoName(n) {
			t.Errorf("%s is not taken for ld.so", n)
		}
	}
	for _, n := range []string{"ld.so.cache", "ldconfig", "libld.so"} {
		if IsLdsoName(n) {
			t.Errorf("%s is taken for ld.so", n)
		}
	}
}

type ioSizeReader struct {
	*os.File
	n int64
}

func (r ioSizeReader) Size() int64 { return r.n }

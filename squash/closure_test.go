package squash

import (
	"os/exec"
	"path"
	"regexp"
	"testing"
)

// The Go reader of /etc/ld.so.cache answers as `ldconfig -p` (glibc's own
// reader) lists the cache, for every name of this architecture.
func TestLdCacheMatchesLdconfig(t *testing.T) {
	out, err := exec.Command("/sbin/ldconfig", "-p").Output()
	if err != nil {
		t.Skipf("ldconfig -p: %v", err)
	}
	c := readLdCache("/etc/ld.so.cache")
	if len(c) == 0 {
		t.Fatal("no entry read from /etc/ld.so.cache")
	}
	re := regexp.MustCompile(`(?m)^\s+(\S+) \(libc6,(x86-64|AArch64)\) => (\S+)$`)
	first := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(string(out), -1) {
		if _, ok := first[m[1]]; !ok {
			first[m[1]] = m[3]
		}
	}
	if len(first) == 0 {
		t.Fatalf("no entry in ldconfig -p:\n%s", out)
	}
	for k, v := range first {
		if c[k] != v {
			t.Errorf("%s: reader says %q, ldconfig -p %q", k, c[k], v)
		}
	}
}

// A library a run loaded from outside brings what it needs: libxml2's
// DT_NEEDED (libicuuc, liblzma...) and theirs (libicudata), found as ld.so
// finds them.
func TestClosureAddsNeeded(t *testing.T) {
	c := readLdCache("/etc/ld.so.cache")
	xml := c["libxml2.so.2"]
	if xml == "" {
		t.Skip("no libxml2 on this node")
	}
	got := map[string]bool{}
	for _, l := range Closure([]Lack{{Path: xml, Library: true}}) {
		got[path.Base(l.Path)] = l.Library
	}
	for _, want := range []string{"libicuuc.so.72", "libicudata.so.72", "liblzma.so.5", "libc.so.6", "libm.so.6"} {
		if _, ok := got[want]; !ok && c[want] != "" {
			t.Errorf("closure of %s lacks %s: %v", xml, want, got)
		}
	}
}

// Per-user caches are left out by default, with their reason; --include
// brings one back.
func TestUserCachesLeftOutByDefault(t *testing.T) {
	t.Setenv("HOME", "/home/someone")
	t.Setenv("XDG_CACHE_HOME", "/scratch/someone/cache")
	rs, err := NewRules(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/home/someone/.cache/mesa_shader_cache/index", "/scratch/someone/cache/pip/x"} {
		if v, r := rs.Match(p); v != Skip || r != ReasonUserCache {
			t.Errorf("%s: verdict %v (%s), want left out as a per-user cache", p, v, r)
		}
	}
	if v, _ := rs.Match("/home/someone/.local/lib/x.py"); v != Bundle {
		t.Errorf("a path beside the cache is not bundled: %v", v)
	}
	rs, err = NewRules([]string{"/home/someone/.cache"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := rs.Match("/home/someone/.cache/mesa_shader_cache/index"); v != Bundle {
		t.Errorf("--include $HOME/.cache does not bring the cache back: %v", v)
	}
}

package squash

import "testing"

// Files glibc reads internally (out of a preload's reach) stay out of the
// image by default, and --include brings them back.
func TestRulesGlibcInternalFiles(t *testing.T) {
	rs, err := NewRules(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{
		"/usr/lib/locale/C.utf8/LC_CTYPE",
		"/usr/lib/locale/locale-archive",
		"/usr/share/locale/locale.alias",
		"/usr/lib/x86_64-linux-gnu/gconv/gconv-modules.cache",
		"/usr/lib64/gconv/gconv-modules.d/gconv-modules-extra.conf",
	} {
		if v, reason := rs.Match(p); v != Exclude || reason != ReasonGlibcInternal {
			t.Errorf("%s: verdict %v (%q), want Exclude for glibc-internal files", p, v, reason)
		}
	}
	for _, p := range []string{
		"/usr/lib/x86_64-linux-gnu/gconv/UTF-16.so", // dlopen'ed through ld.so: servable
		"/usr/share/locale/de/LC_MESSAGES/app.mo",
		"/usr/lib/localepurge",
	} {
		if v, _ := rs.Match(p); v != Bundle {
			t.Errorf("%s: verdict %v, want Bundle", p, v)
		}
	}
	rs, err = NewRules([]string{"/usr/lib/locale"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := rs.Match("/usr/lib/locale/C.utf8/LC_CTYPE"); v != Bundle {
		t.Errorf("--include /usr/lib/locale did not bring locale data back (verdict %v)", v)
	}
}

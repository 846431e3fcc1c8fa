package squash

import (
	"os"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/image"
)

// A pilot in one language bundles the app's catalog in every language, so
// that the image decides DIR/*/<category>/DOMAIN.mo for all of them (the
// shim points glibc at the stage only then).
func TestCatalogsOfEveryLanguage(t *testing.T) {
	root := t.TempDir()
	loc := root + "/share/locale"
	tree(t, root, map[string]string{
		"share/locale/de/LC_MESSAGES/app.mo":   "de",
		"share/locale/fr/LC_MESSAGES/app.mo":   "fr",
		"share/locale/fr/LC_MESSAGES/other.mo": "another domain",
		"share/locale/fr/LC_TIME/app.mo":       "fr time",
		"share/locale/README":                  "catalogs",
	})
	if err := os.Mkdir(loc+"/ja", 0o755); err != nil {
		t.Fatal(err)
	}
	p := newPilot(t)
	// glibc's candidates for LANGUAGE=de_DE: de_DE first (missing), then de.
	p.fail("open", loc+"/de_DE/LC_MESSAGES/app.mo", "ENOENT")
	p.read(loc + "/de/LC_MESSAGES/app.mo")
	plan := build(t, root, Options{}, p.done())

	wantEntry(t, plan, loc, image.TypeDir)
	wantEntry(t, plan, loc+"/fr/LC_MESSAGES/app.mo", image.TypeRegular)
	wantEntry(t, plan, loc+"/fr/LC_TIME/app.mo", image.TypeRegular)
	wantEntry(t, plan, loc+"/fr/LC_MESSAGES", image.TypeDir)
	wantEntry(t, plan, loc+"/ja", image.TypeDir)
	wantEntry(t, plan, loc+"/ja/LC_MESSAGES", image.TypeMissing)
	wantEntry(t, plan, loc+"/README", image.TypeRegular) // README/LC_MESSAGES/app.mo is ENOTDIR
	wantAbsent(t, plan, loc+"/fr/LC_MESSAGES/other.mo")  // another domain: only listed
	// The same order in every build (reproducible images): the added
	// paths come after the record that made them, in a fixed order.
	tr := p.done()
	for i := 0; i < 5; i++ {
		again := build(t, root, Options{}, tr)
		if a, b := order(plan), order(again); a != b {
			t.Fatalf("two builds of the same trace order the entries differently:\n%s\n---\n%s", a, b)
		}
	}
	if plan.Report.Paths != 2 {
		t.Errorf("the report counts %d traced paths, want the 2 the trace names", plan.Report.Paths)
	}
}

// The system's catalog directory (glibc's default, node-local) is not
// expanded: a pilot that read one catalog there bundles that one only.
func TestSystemCatalogsNotExpanded(t *testing.T) {
	var mo string
	for _, l := range []string{"de", "fr", "es"} {
		ents, _ := os.ReadDir("/usr/share/locale/" + l + "/LC_MESSAGES")
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".mo") {
				mo = "/usr/share/locale/" + l + "/LC_MESSAGES/" + e.Name()
				break
			}
		}
		if mo != "" {
			break
		}
	}
	if mo == "" {
		t.Fatal("no catalog under /usr/share/locale/{de,fr,es}/LC_MESSAGES on this machine (Debian's locales come with most packages)")
	}
	p := newPilot(t)
	p.read(mo)
	plan := build(t, t.TempDir(), Options{}, p.done())
	wantEntry(t, plan, mo, image.TypeRegular)
	for _, e := range plan.Entries {
		if strings.HasPrefix(e.Path, "/usr/share/locale/") && strings.HasSuffix(e.Path, ".mo") && e.Path != mo {
			t.Errorf("%s is in the plan: the system's catalogs were expanded", e.Path)
		}
	}
}

func order(plan *Plan) string {
	var b strings.Builder
	for _, e := range plan.Entries {
		b.WriteString(e.Path + "\n")
	}
	return b.String()
}

package loader

import (
	"path/filepath"

	"github.com/dlbundle/dlbundle/internal/abspath"
	"github.com/dlbundle/dlbundle/loader/stagefmt"
)

// ImageLacks reports whether the stage's table decides that path p does not
// exist: the directory it names a file in is bundled (its listing in the
// image is complete) and the name is not in it. exec's search of a bare
// command name along PATH skips such a candidate with no stat on the
// original file system, as the shim would answer ENOENT for it (a PATH
// directory the pilot's own search went through is in the image).
func ImageLacks(stageDir, p string) bool {
	abs, err := abspath.Abs(p)
	if err != nil {
		return false
	}
	tab, release, err := stagefmt.MapTable(stageDir)
	if err != nil {
		return false
	}
	defer release()
	dir, name := filepath.Split(abs)
	if name == "" {
		return false
	}
	// A PATH directory that does not exist: the pilot's own search saw it
	// missing (trace's recordPathSearch), and the table holds it (or an
	// ancestor) as a missing entry.
	for d := filepath.Clean(dir); d != "/"; d = filepath.Dir(d) {
		if t, _, found := stagefmt.Lookup(tab, d); found && t == stagefmt.TabMissing {
			return true
		}
	}
	final, typ, ok := stagefmt.Resolve(tab, filepath.Clean(dir))
	if !ok || typ != stagefmt.TabDir {
		return false
	}
	names, ok := stagefmt.Listing(tab, final)
	if !ok {
		return false
	}
	for _, n := range names {
		if n.Name == name {
			return false
		}
	}
	return true
}

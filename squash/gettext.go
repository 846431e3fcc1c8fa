package squash

import (
	"errors"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// systemCatalogDirs are glibc's default catalog directories: catalogs of
// programs that do not bind their own are node-local system files, and
// their directories hold hundreds of languages; they stay as the rules
// place them, one traced path at a time.
var systemCatalogDirs = map[string]bool{"/usr/share/locale": true, "/usr/local/share/locale": true}

// catalogDir splits p = DIR/LANG/LC_MESSAGES/DOMAIN.mo into DIR and
// DOMAIN.mo (ok false for anything else).
func catalogDir(p string) (dir, file string, ok bool) {
	file = path.Base(p)
	if !strings.HasSuffix(file, ".mo") || len(file) <= 3 {
		return "", "", false
	}
	cat := path.Dir(p)
	if path.Base(cat) != "LC_MESSAGES" {
		return "", "", false
	}
	lang := path.Dir(cat)
	dir = path.Dir(lang)
	if lang == "/" || dir == lang || dir == "/" {
		return "", "", false
	}
	return dir, file, true
}

// addCatalogs completes what the pilot did with a message catalog. glibc's
// gettext opens DIR/LANG/LC_MESSAGES/DOMAIN.mo for the languages of the
// run's LANGUAGE and locale, with internal calls that no preload sees; the
// shim can only point the whole DIR (bindtextdomain's argument) at the
// stage, which it does when the image decides the catalog for every name
// in DIR. So when the pilot opened or probed one such catalog, every
// DIR/*/LC_MESSAGES/DOMAIN.mo (and DIR/*/<other category>/DOMAIN.mo) is
// recorded as the pilot would have seen it:
// read when it exists (catalogs are small), else missing, so that the
// directories on the way are bundled with their listings. A run in another
// language then reads its catalog from the stage too. The prefix rules
// still decide each path (place()).
func (b *builder) addCatalogs() {
	type dom struct{ dir, file string }
	done := map[dom]bool{}
	for _, x := range b.uses.inOrder() {
		if !x.read && !x.enoent {
			continue
		}
		dir, file, ok := catalogDir(x.path)
		if !ok || systemCatalogDirs[dir] || done[dom{dir, file}] {
			continue
		}
		done[dom{dir, file}] = true
		if v, _ := b.rules.Match(dir); v != Bundle {
			continue
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue // the pilot's own uses decide, as for any path
		}
		// Keys after the record's own, in the listing's sorted order: the
		// image's load order stays the same from build to build.
		k := x.key
		next := func() orderKey { k.sub++; return k }
		b.uses.get(dir, next()).dirUse = true
		var paths []string
		for _, e := range ents {
			lang := dir + "/" + e.Name()
			paths = append(paths, lang+"/LC_MESSAGES/"+file)
			// dcgettext's other categories (LC_TIME...) read the same
			// directory: the shim needs them decided as well.
			cats, _ := os.ReadDir(lang)
			for _, c := range cats {
				if c.Name() != "LC_MESSAGES" {
					paths = append(paths, lang+"/"+c.Name()+"/"+file)
				}
			}
		}
		for _, p := range paths {
			if _, seen := b.uses.byPath[p]; seen {
				continue // the pilot's own record of it wins
			}
			y := b.uses.get(p, next())
			y.reported, y.pilot = x.reported, x.pilot
			st, err := os.Stat(p)
			switch {
			case err == nil && st.Mode().IsRegular():
				y.read = true
			case err == nil:
				y.looked = true
			case errors.Is(err, unix.ENOTDIR):
				y.enotdir = true
			case errors.Is(err, unix.ENOENT):
				y.enoent = true
			default:
				y.otherErr = err.Error()
			}
		}
	}
}

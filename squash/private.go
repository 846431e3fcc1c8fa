package squash

import (
	"fmt"
	"path"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/image"
)

// Confidentiality. An image holds copies of its inputs;
// whoever can read the image reads them all. So an image must be no more
// readable than its least readable input: a 0600 ~/.netrc that the pilot
// read must not become readable by every user from an image on shared
// storage. Readable here means what the kernel would allow another user:
// the read bit of a file or directory (its listing is in the image too) and
// the search bit of every directory above it (a 0644 file below a 0700 home
// is private). Symbolic links and known-missing names have no content, but
// their names and targets are in the image: they count through the
// directories above them.

// Private is an input that not every user of the machine may read.
type Private struct {
	Path string
	Why  string // "mode 0600" or "below /home/u, mode 0700"
}

// Readers says which users other than the image's owner may read every
// input of a plan, and lists the inputs that not every user may read.
type Readers struct {
	World   bool      // every user may read every input
	Group   bool      // every member of the group asked about may read every input
	Private []Private // inputs some users may not read (World is false if any)
}

// CheckReaders looks at the plan's entries (their recorded mode, owner
// and group) and, for directories above them that the plan does not hold,
// at the file system (lstat, once per directory), and says who may read all
// of them: every user, and the members of group gid (the image's group).
func CheckReaders(entries []image.Entry, gid uint32) Readers {
	byPath := make(map[string]*image.Entry, len(entries))
	for i := range entries {
		byPath[entries[i].Path] = &entries[i]
	}
	type perm struct {
		mode, gid uint32
		ok        bool
	}
	dirs := map[string]perm{}
	dirPerm := func(d string) perm {
		if e := byPath[d]; e != nil && e.Type == image.TypeDir {
			return perm{e.Mode, e.GID, true}
		}
		if p, ok := dirs[d]; ok {
			return p
		}
		var st unix.Stat_t
		p := perm{}
		if unix.Stat(d, &st) == nil {
			p = perm{st.Mode, st.Gid, true}
		}
		dirs[d] = p
		return p
	}
	// can reports whether "other" users (group false) or members of gid
	// (group true) get bit (4 read, 1 search) on an object.
	can := func(mode, ogid uint32, bit uint32, group bool) bool {
		if mode&bit != 0 { // others
			return true
		}
		return group && ogid == gid && mode&(bit<<3) != 0
	}
	r := Readers{World: true, Group: true}
	for i := range entries {
		e := &entries[i]
		world, grp, why := true, true, ""
		if e.Type == image.TypeRegular || e.Type == image.TypeDir {
			if !can(e.Mode, e.GID, 4, false) {
				world, why = false, fmt.Sprintf("mode %04o", e.Mode&0o7777)
			}
			grp = can(e.Mode, e.GID, 4, true)
		}
		for d := path.Dir(e.Path); e.Path != "/" && d != "/"; d = path.Dir(d) {
			p := dirPerm(d)
			if !p.ok {
				continue // gone since the pilot: the build reports it elsewhere
			}
			if world && !can(p.mode, p.gid, 1, false) {
				world, why = false, fmt.Sprintf("below %s, mode %04o", d, p.mode&0o7777)
			}
			grp = grp && can(p.mode, p.gid, 1, true)
		}
		r.Group = r.Group && grp
		if !world {
			r.World = false
			r.Private = append(r.Private, Private{Path: e.Path, Why: why})
		}
	}
	return r
}

package stagefmt

import "strings"

// ResolveFile follows the table's symlinks along p (as execve would,
// like the shim's resolver) and returns the bundled regular file it names.
// Anything the table cannot decide is "not bundled".
func ResolveFile(tab []byte, p string) (string, bool) {
	final, typ, ok := Resolve(tab, p)
	return final, ok && typ == TabReg
}

// Resolve follows the table's symlinks along p and returns the bundled
// regular file or directory it names with its table type; ok is false when
// the table cannot decide (or p names anything else).
func Resolve(tab []byte, p string) (final string, typ uint8, ok bool) {
	rest := strings.Split(strings.TrimPrefix(p, "/"), "/")
	var out []string // resolved components
	links := 0
	last := uint8(0)
	if t, _, found := Lookup(tab, "/"); found {
		last = t
	}
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(out) > 0 {
				// Only a directory the table knows may be popped.
				if typ, _, ok := Lookup(tab, "/"+strings.Join(out, "/")); !ok || typ != TabDir {
					return "", 0, false
				}
				out = out[:len(out)-1]
				last = TabDir
			}
			continue
		}
		out = append(out, c)
		cur := "/" + strings.Join(out, "/")
		typ, _, ok := Lookup(tab, cur)
		last = typ
		switch {
		case !ok || typ == TabExternal:
			if len(rest) == 0 {
				return "", 0, false
			}
		case typ == TabReg:
			return cur, TabReg, len(rest) == 0
		case typ == TabSymlink:
			if links++; links > 40 {
				return "", 0, false
			}
			t, _ := Target(tab, cur)
			out = out[:len(out)-1]
			if strings.HasPrefix(t, "/") {
				out = nil
			}
			rest = append(strings.Split(t, "/"), rest...)
			last = TabSymlink
		case typ == TabMissing:
			return "", 0, false
		}
	}
	if last != TabDir {
		return "", 0, false
	}
	return "/" + strings.Join(out, "/"), TabDir, true
}

package untrusted

import (
	"strconv"
	"unicode"
	"unicode/utf8"
)

// Quote returns s unchanged when it is valid UTF-8 made of printable
// characters and spaces only and does not start with a double quote, and
// otherwise s as a Go string literal ("a\nb", "\x1b[2J", "\u202e"), so that a
// reader can tell an escaped string from a plain one: control bytes, invalid
// UTF-8 and invisible or reordering characters (format characters such as
// U+202E, line and paragraph separators) are escaped, everything else is
// printed as it is. Plain paths, the usual case, come out unchanged and
// without quotes, so that output stays easy to read and to grep.
func Quote(s string) string {
	if plain(s) {
		return s
	}
	return strconv.Quote(s)
}

func plain(s string) bool {
	if len(s) > 0 && s[0] == '"' {
		return false
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < ' ' || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			return false
		}
		if !unicode.IsPrint(r) {
			return false
		}
		i += n
	}
	return true
}

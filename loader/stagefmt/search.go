package stagefmt

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// STAGE/search holds this node's ld.so search rules: the subdirectories
// ld.so probes below every search directory and the system directories
// (node/materialize/ldsearch.go finds them; audit.c's read_rules reads
// them). Writer and reader agree through FormatSearchRules and
// CheckSearchRules.

// MaxSearchRules bounds the rules; with the real functions' places after
// them (reals.go, MaxRealsText) the file fits audit.c's 8 KiB buffer.
const MaxSearchRules = 4000

// FormatSearchRules writes the STAGE/search text, checked as audit.c reads it.
func FormatSearchRules(caps, dirs []string) ([]byte, error) {
	var b strings.Builder
	b.WriteString("dlbundle-search 1\n")
	for _, c := range caps {
		fmt.Fprintf(&b, "cap %s\n", c)
	}
	for _, d := range dirs {
		if !strings.HasPrefix(d, "/") || strings.ContainsAny(d, "\n") {
			return nil, fmt.Errorf("system directory %q is not absolute", d)
		}
		fmt.Fprintf(&b, "dir %s\n", d)
	}
	if err := CheckSearchRules([]byte(b.String())); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
}

// CheckSearchRules checks what audit.c's reader (read_rules) accepts, so that a
// file it would ignore is never written or kept: the header, then "cap X/"
// lines ending with "cap ", then "dir /..." lines, no more than its 32 and
// 16 slots, no NUL, shorter than its buffer; then, in a stage's file, the
// real functions' places (reals.go).
func CheckSearchRules(b []byte) error {
	if i := bytes.Index(b, []byte("\nlibc ")); i >= 0 {
		if err := checkReals(b[i+1:]); err != nil {
			return err
		}
		b = b[:i+1]
	}
	if len(b) >= MaxSearchRules {
		return fmt.Errorf("search rules of %d bytes are longer than the shim's buffer", len(b))
	}
	body, ok := bytes.CutPrefix(b, []byte("dlbundle-search 1\n"))
	if !ok || bytes.IndexByte(b, 0) >= 0 || len(body) == 0 || body[len(body)-1] != '\n' {
		return errors.New("search rules: not in the format of dlbundle-search 1")
	}
	var caps, dirs int
	lastCap := "-"
	for _, l := range strings.Split(string(body[:len(body)-1]), "\n") {
		switch {
		case strings.HasPrefix(l, "cap ") && dirs == 0:
			if lastCap = l[4:]; lastCap != "" && !strings.HasSuffix(lastCap, "/") {
				return fmt.Errorf("search rules: subdirectory %q", lastCap)
			}
			caps++
		case strings.HasPrefix(l, "dir /") && caps > 0:
			dirs++
		default:
			return fmt.Errorf("search rules: line %q", l)
		}
	}
	switch {
	case caps == 0 || lastCap != "":
		return errors.New("search rules: the subdirectories do not end with the directory itself")
	case dirs == 0:
		return errors.New("search rules: no system directory")
	case caps > 32 || dirs > 16:
		return fmt.Errorf("search rules: %d subdirectories and %d directories; the shim holds 32 and 16", caps, dirs)
	}
	return nil
}

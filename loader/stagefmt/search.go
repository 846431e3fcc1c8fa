package stagefmt

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// STAGE/search holds this node's ld.so search rules: the subdirectories
// ld.so probes below every search directory and the system directories
// (node/materialize/ldsearch.go finds them; audit.c's read_rules reads
// them from the table, WriteSearch). Writer and reader agree through
// FormatSearchRules and CheckSearchRules.

// MaxSearchRules bounds the rules; with the real functions' places after
// them (reals.go, MaxRealsText) they fit the table's room (SearchRoom).
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
// node's ld.so.cache answers (ldcache.go) and the real functions' places
// (reals.go).
func CheckSearchRules(b []byte) error {
	if i := bytes.Index(b, []byte("\nlibc ")); i >= 0 {
		if err := checkReals(b[i+1:]); err != nil {
			return err
		}
		b = b[:i+1]
	}
	if i := bytes.Index(b, []byte("\ncache ")); i >= 0 {
		if err := checkCacheAnswers(b[i+1:]); err != nil {
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

// SearchRoom is the room EncodeTable leaves right after the table's header
// for the node's search rules (the header's search: its offset, search_len:
// 0 until WriteSearch fills it). The rules are the one part of a stage's
// table that depends on the node, known only after extraction; audit.so
// reads them in the mapping it makes anyway, in the first pages, which the
// header's own page fault maps with them: one file opened per process, not
// two (the open, read and close of STAGE/search, and the page of .bss its
// buffer took, were paid by every process), and no page fault of their own
// (rules appended at the table's end, written apart from the rest, fault
// apart). Rules and real functions' places (CheckSearchRules: under
// MaxSearchRules + MaxRealsText bytes) and their NUL fit.
const SearchRoom = 8192

// WriteSearch writes the node's search rules (the text of STAGE/search,
// real functions' places included) into the room the stage's table keeps
// for them, checked as the shim reads them and followed by a NUL that
// search_len leaves out. Called once, at staging, after the table is
// written and before the stage is published; a table that already holds
// rules, or has no room, is an error.
func WriteSearch(dir string, rules []byte) error {
	if err := CheckSearchRules(rules); err != nil {
		return err
	}
	if len(rules) >= SearchRoom {
		return fmt.Errorf("materialize: search rules of %d bytes do not fit the table's %d", len(rules), SearchRoom)
	}
	tpath := filepath.Join(dir, TableFile)
	f, err := os.Open(tpath)
	if err != nil {
		return fmt.Errorf("materialize: write search rules: %w", err)
	}
	var hb [tableHeaderLen]byte
	_, err = io.ReadFull(f, hb[:])
	st, serr := f.Stat()
	f.Close()
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("materialize: write search rules into %s: %w", tpath, err)
	}
	var hdr tableHeaderRec
	hdr.get(hb[:])
	switch {
	case string(hdr.Magic[:]) != tableMagic:
		return fmt.Errorf("materialize: write search rules: %s is not a lookup table", tpath)
	case hdr.Size != uint64(st.Size()):
		return fmt.Errorf("materialize: write search rules: %s is %d bytes, its header says %d", tpath, st.Size(), hdr.Size)
	case hdr.Search != tableHeaderLen || hdr.Buckets < tableHeaderLen+SearchRoom:
		return fmt.Errorf("materialize: write search rules: %s has no room for them", tpath)
	case hdr.SearchLen != 0:
		return fmt.Errorf("materialize: write search rules: %s holds rules already", tpath)
	}
	hdr.SearchLen = uint32(len(rules))
	hdr.put(hb[:])
	// The table is written read-only (0444); the stage is not published yet.
	if err := os.Chmod(tpath, 0o644); err != nil {
		return fmt.Errorf("materialize: write search rules: %w", err)
	}
	w, err := os.OpenFile(tpath, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("materialize: write search rules: %w", err)
	}
	_, err = w.WriteAt(append(slices.Clip(rules), 0), int64(hdr.Search))
	if err == nil {
		_, err = w.WriteAt(hb[:], 0) // last: a header that names rules has them
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("materialize: write search rules into %s: %w", tpath, err)
	}
	return os.Chmod(tpath, 0o444)
}

// TableSearch returns the search rules a table holds (WriteSearch), or nil.
func TableSearch(tab []byte) []byte {
	if len(tab) < tableHeaderLen {
		return nil
	}
	var hdr tableHeaderRec
	hdr.get(tab)
	if hdr.SearchLen == 0 || hdr.Search > uint64(len(tab)) || uint64(hdr.SearchLen) >= uint64(len(tab))-hdr.Search {
		return nil
	}
	return tab[hdr.Search : hdr.Search+uint64(hdr.SearchLen)]
}

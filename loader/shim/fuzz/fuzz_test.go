//go:build cgo

package shimfuzz

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"path"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// Entry types (docs/loader.md).
const (
	tReg, tDir, tSymlink, tMissing, tExternal = 1, 2, 3, 4, 5
)

type row struct {
	path, target string
	typ          uint8
}

func fnv(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// listingOf is what encode writes as directory r's listing: ".", "..", then
// the rows right below it, in row order.
func listingOf(rows []row, r row) []string {
	names := []string{".", ".."}
	for _, c := range rows {
		if c.path != r.path && path.Dir(c.path) == r.path {
			names = append(names, path.Base(c.path))
		}
	}
	return names
}

// encode writes a table as docs/loader.md specifies it (an encoder of its
// own, independent of loader/stagefmt/table.go: the spec is what both follow). Each
// listed name is a string of its own here (the spec allows it; table.go
// points into the name's path instead); a record's ino is its position.
func encode(rows []row) []byte {
	nb := uint32(8)
	for int(nb) < 2*len(rows) {
		nb <<= 1
	}
	le := binary.LittleEndian
	bo := uint64(64)
	eo := (bo + 8*uint64(nb) + 7) &^ 7
	lo := eo + 96*uint64(len(rows)) // the listings
	so := lo
	for _, r := range rows {
		if r.typ == tDir {
			so += 16 * uint64(len(listingOf(rows, r)))
		}
	}
	buf := make([]byte, so)
	str := func(s string) uint32 {
		off := uint32(len(buf))
		buf = append(buf, s...)
		buf = append(buf, 0)
		return off
	}
	for i, r := range rows {
		h := fnv(r.path)
		b := uint32(h) & (nb - 1)
		for le.Uint32(buf[bo+4*uint64(b):]) != 0 {
			b = (b + 1) & (nb - 1)
		}
		le.PutUint32(buf[bo+4*uint64(b):], uint32(i+1))                // index + 1
		le.PutUint32(buf[bo+4*uint64(nb)+4*uint64(b):], uint32(h>>32)) // the tag, after the buckets
		e := eo + 96*uint64(i)
		le.PutUint64(buf[e:], h)
		po := str(r.path)
		le.PutUint32(buf[e+8:], po)
		le.PutUint32(buf[e+12:], uint32(len(r.path)))
		if r.typ == tSymlink {
			// str first: its append may move buf, and buf[e+16:] evaluated
			// before it would write into the old array.
			to := str(r.target)
			le.PutUint32(buf[e+16:], to)
			le.PutUint32(buf[e+20:], uint32(len(r.target)))
		}
		if r.typ == tDir {
			names := listingOf(rows, r)
			le.PutUint32(buf[e+16:], uint32(lo))
			le.PutUint32(buf[e+20:], uint32(len(names)))
			for k, n := range names {
				no := str(n)
				le.PutUint64(buf[lo:], uint64(k))
				le.PutUint32(buf[lo+8:], no)
				buf[lo+12] = uint8(len(n))
				buf[lo+13] = 4 // DT_DIR: the reader passes d_type through
				lo += 16
			}
		}
		buf[e+24] = r.typ
		mode := map[uint8]uint32{tReg: 0o100644, tDir: 0o40755, tSymlink: 0o120777}[r.typ]
		le.PutUint32(buf[e+28:], mode)
	}
	copy(buf, "DLBTBL1\x00")
	le.PutUint32(buf[8:], 3)
	le.PutUint32(buf[12:], nb)
	le.PutUint32(buf[16:], uint32(len(rows)))
	le.PutUint64(buf[24:], bo)
	le.PutUint64(buf[32:], eo)
	le.PutUint64(buf[40:], so)
	le.PutUint64(buf[48:], uint64(len(buf)))
	return buf
}

// rowsOf turns fuzz text into table rows: one "TYPE PATH [TARGET]" a line,
// with the parents of every path added as directories, as an image has them.
func rowsOf(spec string) []row {
	seen := map[string]bool{}
	var rows []row
	add := func(r row) {
		if !seen[r.path] {
			seen[r.path] = true
			rows = append(rows, r)
		}
	}
	add(row{path: "/", typ: tDir})
	for _, l := range strings.Split(spec, "\n") {
		f := strings.SplitN(l, " ", 3)
		if len(f) < 2 || len(f[0]) != 1 || f[0][0] < '1' || f[0][0] > '5' {
			continue
		}
		p := path.Clean("/" + f[1])
		if strings.IndexByte(p, 0) >= 0 || seen[p] || len(p) >= PathMax || len(path.Base(p)) > 255 {
			continue
		}
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if !seen[d] {
				defer add(row{path: d, typ: tDir}) // a parent: a directory (unless listed itself)
			}
		}
		r := row{path: p, typ: f[0][0] - '0'}
		if r.typ == tSymlink {
			if len(f) < 3 || f[2] == "" || strings.IndexByte(f[2], 0) >= 0 {
				continue
			}
			r.target = f[2]
		}
		add(r)
	}
	// A path below a non-directory cannot exist (the format relies on it).
	var out []row
	for _, r := range rows {
		ok := true
		for d := path.Dir(r.path); d != "/" && ok; d = path.Dir(d) {
			for _, x := range rows {
				if x.path == d && x.typ != tDir {
					ok = false
				}
			}
		}
		if ok {
			out = append(out, r)
		}
	}
	return out
}

// FuzzTableResolve: for tables written as the spec says, every entry is
// found by exact lookup and a regular file or directory resolves to
// itself; any path resolves (no crash, no out-of-bounds read: run with
// -asan) to an answer the shim can use: a known error with an errno the
// kernel uses, a bundled entry whose canonical path finds that entry, or
// unknown (a rewritten path then is absolute and shorter than PATH_MAX).
func FuzzTableResolve(f *testing.F) {
	f.Add("2 /usr\n2 /usr/lib\n1 /usr/lib/libc.so.6\n3 /lib usr/lib\n4 /usr/lib/nope\n5 /tmp", "/lib/libc.so.6", true)
	f.Add("3 /a/l1 l2\n3 /a/l2 l1\n1 /a/f", "/a/l1/../f/.", false)
	f.Add("2 /d\n3 /d/up ..\n3 /d/abs /d/up/d", "/d/abs/up/abs/"+strings.Repeat("n", 300), true)
	f.Fuzz(func(t *testing.T, spec, p string, follow bool) {
		rows := rowsOf(spec)
		tab := NewTable(encode(rows))
		defer tab.Free()
		if !tab.Check() {
			t.Fatalf("dlb_check refused a table written as the spec says: %q", spec)
		}
		for i, r := range rows {
			if got := tab.Lookup(r.path); got != i {
				t.Fatalf("lookup %q = entry %d, want %d", r.path, got, i)
			}
			if r.typ == tReg || r.typ == tDir {
				if res := tab.Resolve(r.path, follow); res.RC != Bundled || res.Entry != i || res.Out != r.path {
					t.Fatalf("resolve %q = %+v, want entry %d", r.path, res, i)
				}
			}
			if got, want := tab.Listing(r.path), listingOf(rows, r); r.typ == tDir && !slices.Equal(got, want) || r.typ != tDir && got != nil {
				t.Fatalf("listing of %q (type %d) = %q, want %q", r.path, r.typ, got, want)
			}
		}
		if strings.IndexByte(p, 0) >= 0 {
			return
		}
		res := tab.Resolve(p, follow)
		switch res.RC {
		case KnownErr:
			switch res.Err {
			case 2, 20, 36, 40: // ENOENT, ENOTDIR, ENAMETOOLONG, ELOOP
			default:
				t.Fatalf("resolve %q: errno %d", p, res.Err)
			}
		case Bundled:
			if res.Entry < 0 || res.Entry >= len(rows) || tab.Lookup(res.Out) != res.Entry {
				t.Fatalf("resolve %q = %+v: the canonical path does not find the entry", p, res)
			}
			if typ := rows[res.Entry].typ; typ == tMissing || typ == tExternal || typ == tSymlink && follow && res.Out == p {
				t.Fatalf("resolve %q = bundled entry of type %d", p, typ)
			}
		case Unknown:
			if res.Rewritten && (!strings.HasPrefix(res.Out, "/") || len(res.Out) >= PathMax) {
				t.Fatalf("resolve %q rewrote it to %q", p, res.Out)
			}
		default:
			t.Fatalf("resolve %q: outcome %d", p, res.RC)
		}
	})
}

// FuzzTableCheck: whatever bytes the table holds (a damaged or hostile
// stage), dlb_check either refuses them or every lookup and resolution on
// them stays inside the table and ends (run with -asan: an out-of-bounds
// read is a crash).
func FuzzTableCheck(f *testing.F) {
	good := encode(rowsOf("1 /a/b\n3 /a/l b\n4 /a/m\n5 /x"))
	f.Add(good, uint16(0), uint64(0), "/a/l")
	f.Add(good, uint16(24), uint64(1)<<63, "/a/b")
	f.Add(good, uint16(32), ^uint64(0)-7, "/x/y")
	f.Fuzz(func(t *testing.T, b []byte, at uint16, v uint64, p string) {
		if len(b) >= 8 && int(at)+8 <= len(b) {
			b = bytes.Clone(b)
			binary.LittleEndian.PutUint64(b[at:], v) // a targeted overwrite: offsets, counts
		}
		if len(b) >= 56 {
			binary.LittleEndian.PutUint64(b[48:], uint64(len(b))) // else almost nothing passes
		}
		tab := NewTable(b)
		defer tab.Free()
		if !tab.Check() || strings.IndexByte(p, 0) >= 0 {
			return
		}
		tab.Lookup(p)
		tab.Resolve(p, true)
		tab.Resolve(p, false)
		tab.Listing(p)
		tab.Listing("/")
	})
}

// utf8Bytewise is what the writer makes of a path: each byte that is not
// part of valid UTF-8 becomes U+FFFD.
func utf8Bytewise(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteString("\uFFFD")
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// FuzzReportLine: whatever the paths, the line fits its buffer, is valid
// JSON, lists a subsequence of the paths exactly (as UTF-8) in each of its
// two lists ("outside", then "passed_paths"), a subsequence of the
// fallbacks (reason, directory, count), and counts every path and fallback
// it leaves out in "dropped".
func FuzzReportLine(f *testing.F) {
	f.Add("/usr/bin/python3", "/a\x00/b\"\\\x01\xff\x00/c", uint32(0), int64(42), uint64(3), uint16(0), uint8(1), uint8(2))
	f.Add(strings.Repeat("\x01", 5000), strings.Repeat("\"\\", 3000), uint32(100), int64(-1), uint64(1)<<63, uint16(5), uint8(0), uint8(9))
	f.Fuzz(func(t *testing.T, exe, blob string, extra uint32, pid int64, dropped uint64, absentMask uint16, nout, nfb uint8) {
		if strings.IndexByte(exe, 0) >= 0 {
			return
		}
		if dropped > 1<<62 {
			dropped = 1 << 62 // no overflow of the count itself
		}
		var paths []*string
		var want []string
		for i, p := range strings.Split(blob, "\x00") {
			if p == "" {
				continue
			}
			if i < 16 && absentMask&(1<<i) != 0 {
				paths = append(paths, nil)
				continue
			}
			s := p
			paths = append(paths, &s)
			want = append(want, utf8Bytewise(p))
		}
		capacity := LineMin + int(extra%(1<<17))
		counts := [3]uint64{uint64(len(exe)), uint64(pid), dropped}
		no := int(nout)
		if no > len(paths) {
			no = len(paths)
		}
		wantOut := 0 // want[:wantOut] are the "outside" ones
		for _, p := range paths[:no] {
			if p != nil {
				wantOut++
			}
		}
		var fbn []uint64
		for i := 0; i < int(nfb%16) && i < len(paths); i++ {
			fbn = append(fbn, uint64(i)*1000+uint64(pid)&0xffff)
		}
		reasons := []string{"written", "written-everything", "no-table", "dirfd"}
		type fbw struct {
			Reason, Dir string
			Lookups     uint64
		}
		var wantFB []fbw
		for i := range fbn {
			if paths[i] != nil {
				wantFB = append(wantFB, fbw{reasons[i%4], utf8Bytewise(*paths[i]), fbn[i]})
			}
		}
		line := ReportLine(capacity, pid, exe, counts, paths, no, fbn, dropped)
		if len(line) > capacity {
			t.Fatalf("line of %d bytes in a %d-byte buffer", len(line), capacity)
		}
		if !bytes.HasSuffix(line, []byte("}\n")) || !json.Valid(line) {
			t.Fatalf("not a valid JSON line: %.300q", line)
		}
		var r struct {
			PID         int64    `json:"pid"`
			Exe         string   `json:"exe"`
			Answered    uint64   `json:"answered"`
			Missing     uint64   `json:"missing"`
			Passed      uint64   `json:"passed"`
			Outside     []string `json:"outside"`
			PassedPaths []string `json:"passed_paths"`
			Dropped     uint64   `json:"dropped"`
			Fallbacks   []fbw    `json:"fallbacks"`
		}
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatal(err)
		}
		wexe := exe
		if len(wexe) > ExeMax {
			wexe = wexe[:ExeMax]
		}
		if r.PID != pid || r.Exe != utf8Bytewise(wexe) || r.Answered != counts[0] || r.Missing != counts[1] || r.Passed != counts[2] {
			t.Fatalf("fields changed: %+v", r)
		}
		// The listed paths are the given ones in order, some left out,
		// each in its own list.
		for _, l := range []struct {
			got  []string
			want []string
		}{{r.Outside, want[:wantOut]}, {r.PassedPaths, want[wantOut:]}} {
			j := 0
			for _, p := range l.got {
				for j < len(l.want) && l.want[j] != p {
					j++
				}
				if j == len(l.want) {
					t.Fatalf("listed %q, which is not among its list's paths in order", p)
				}
				j++
			}
		}
		j := 0
		for _, g := range r.Fallbacks {
			for j < len(wantFB) && wantFB[j] != g {
				j++
			}
			if j == len(wantFB) {
				t.Fatalf("listed fallback %+v, which is not among the fallbacks in order", g)
			}
			j++
		}
		listed := len(r.Outside) + len(r.PassedPaths) + len(r.Fallbacks)
		if got := uint64(listed) + r.Dropped; got != uint64(len(paths)+len(fbn))+dropped {
			t.Fatalf("%d listed + %d dropped != %d paths + %d fallbacks + %d dropped before", listed, r.Dropped, len(paths), len(fbn), dropped)
		}
	})
}

// TestTableCheckRefuses: tables whose header would make a lookup read
// outside the table. Found by FuzzTableCheck: a bucket offset near 2^64
// wrapped the bounds check (heap-buffer-overflow under -asan).
func TestTableCheckRefuses(t *testing.T) {
	good := encode(rowsOf("1 /a/b\n3 /a/l b\n4 /a/m\n5 /x"))
	le := binary.LittleEndian
	for name, damage := range map[string]func(b []byte){
		"buckets offset wraps": func(b []byte) { le.PutUint64(b[24:], ^uint64(0)) },
		"entries offset wraps": func(b []byte) { le.PutUint64(b[32:], ^uint64(0)-95) },
		"buckets unaligned":    func(b []byte) { le.PutUint64(b[24:], 65) },
		"entries unaligned":    func(b []byte) { le.PutUint64(b[32:], le.Uint64(b[32:])+4) },
		"entries past the end": func(b []byte) { le.PutUint32(b[16:], le.Uint32(b[12:])-1) },
	} {
		b := bytes.Clone(good)
		damage(b)
		tab := NewTable(b)
		if tab.Check() {
			t.Errorf("%s: dlb_check accepted the table", name)
		}
		tab.Free()
	}
}

// TestTableLookupDistrustsDamage: dlb_check reads the header only (the shim
// maps the table in every process and must not touch all of it); damage in
// the arrays is met by the lookup: a probe ends without an empty bucket, a
// bucket naming no entry is passed over, an entry whose path leaves the
// table never matches. Each case would read out of bounds or never end
// without its check (run with -asan).
func TestTableLookupDistrustsDamage(t *testing.T) {
	good := encode(rowsOf("2 /a\n1 /a/b\n3 /a/l b\n4 /a/m\n5 /x"))
	le := binary.LittleEndian
	nb := le.Uint32(good[12:])
	gt := NewTable(good)
	ab := gt.Lookup("/a/b") // the entry the cases damage
	ad := gt.Lookup("/a")   // the directory whose listing they damage
	gt.Free()
	if ab < 0 || ad < 0 {
		t.Fatal("the undamaged table lacks /a/b or /a")
	}
	e := le.Uint64(good[32:]) + 96*uint64(ab)
	// last: the table's last string with its NUL ("/x\x00" or so)
	last := string(good[bytes.LastIndexByte(good[:len(good)-1], 0)+1:])
	// every: each bucket names the damaged entry, tagged as p's hash, so
	// that a probe for p meets it
	every := func(b []byte, p string) {
		for i := uint32(0); i < nb; i++ {
			le.PutUint32(b[64+4*i:], uint32(ab)+1)
			le.PutUint32(b[64+4*nb+4*i:], uint32(fnv(p)>>32))
		}
	}
	for name, c := range map[string]struct {
		damage func(b []byte)
		path   string
		found  bool
	}{
		// every bucket taken: a probe for an absent path must still end
		"no empty bucket": {func(b []byte) { every(b, "/nope") }, "/nope", false},
		"buckets name no entry": {func(b []byte) {
			for i := uint32(0); i < nb; i++ {
				if le.Uint32(b[64+4*i:]) != 0 {
					le.PutUint32(b[64+4*i:], 1000)
				}
			}
		}, "/a/b", false},
		// an entry naming the table's last bytes (a string and its NUL)
		// ends exactly at the table's end: its NUL would lie past it
		"path leaves the table": {func(b []byte) {
			every(b, last)
			le.PutUint64(b[e:], fnv(last))
			le.PutUint32(b[e+8:], uint32(len(b)-len(last)))
			le.PutUint32(b[e+12:], uint32(len(last)))
		}, last, false},
		// hash and length of "/a/", its bytes "/a/b": no NUL at the end
		"path not NUL-terminated": {func(b []byte) {
			every(b, "/a/")
			le.PutUint64(b[e:], fnv("/a/"))
			le.PutUint32(b[e+12:], 3)
		}, "/a/", false},
		"target leaves the table": {func(b []byte) { le.PutUint32(b[e+16:], uint32(len(b))) }, "/a/b", false},
		// a directory's listing array past the end, or a record's name:
		// the listing is empty, or the record passed over (tab.Listing)
		"listing leaves the table": {func(b []byte) {
			d := le.Uint64(b[32:]) + 96*uint64(ad)
			le.PutUint32(b[d+20:], uint32(len(b)/16))
		}, "/a", true},
		"listed name leaves the table": {func(b []byte) {
			d := le.Uint64(b[32:]) + 96*uint64(ad)
			le.PutUint32(b[le.Uint32(b[d+16:])+8:], uint32(len(b)-1))
		}, "/a", true},
		"undamaged": {func([]byte) {}, "/a/b", true},
	} {
		b := bytes.Clone(good)
		c.damage(b)
		tab := NewTable(b)
		if !tab.Check() {
			t.Errorf("%s: dlb_check refused a table with a good header", name)
		} else if got := tab.Lookup(c.path); (got >= 0) != c.found {
			t.Errorf("%s: lookup %s = entry %d, want found = %v", name, c.path, got, c.found)
		} else {
			tab.Resolve(c.path, true)
			tab.Listing(c.path)
		}
		tab.Free()
	}
}

package squash

import (
	"bytes"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/trace"
)

// pilot writes a trace with trace.Writer, as `dlbundle trace` would, for
// trees the tests build with real files.
type pilot struct {
	t   *testing.T
	buf bytes.Buffer
	w   *trace.Writer
	now int64
}

func newPilot(t *testing.T) *pilot {
	p := &pilot{t: t}
	w, err := trace.NewWriter(&p.buf, trace.Header{Command: []string{"test"}, Cwd: "/", Start: "2026-01-01T00:00:00Z"})
	if err != nil {
		t.Fatal(err)
	}
	p.w = w
	return p
}

func (p *pilot) ev(e trace.Event) {
	p.now += 1000
	if e.T == 0 {
		e.T = p.now
	}
	if err := p.w.Event(&e); err != nil {
		p.t.Fatal(err)
	}
}

// read records a successful read-only open with the size and mtime the file has now.
func (p *pilot) read(name string) {
	st, err := os.Stat(name)
	if err != nil {
		p.t.Fatal(err)
	}
	size, mt := st.Size(), st.ModTime().UnixNano()
	fd := 3
	p.ev(trace.Event{Op: trace.OpOpen, Syscall: "openat", Path: name, FD: &fd, Size: &size, MtimeNS: &mt})
}

func (p *pilot) fail(op trace.Op, name, errno string) {
	p.ev(trace.Event{Op: op, Syscall: "openat", Path: name, Err: errno})
}

func (p *pilot) close() {
	if p.w != nil {
		if err := p.w.Close(0, 1); err != nil {
			p.t.Fatal(err)
		}
		p.w = nil
	}
}

// save writes the trace to a file, as `dlbundle trace` would.
func (p *pilot) save(name string) {
	p.close()
	if err := os.WriteFile(name, p.buf.Bytes(), 0o644); err != nil {
		p.t.Fatal(err)
	}
}

func (p *pilot) done() *trace.Trace {
	p.close()
	tr, err := trace.Read(bytes.NewReader(p.buf.Bytes()), "test")
	if err != nil {
		p.t.Fatal(err)
	}
	return tr
}

// tree creates files (content), directories (trailing /) and symlinks ("-> target") under root.
func tree(t *testing.T, root string, spec map[string]string) {
	t.Helper()
	names := make([]string, 0, len(spec))
	for n := range spec {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		v := spec[n]
		full := filepath.Join(root, n)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case strings.HasSuffix(n, "/"):
			err = os.MkdirAll(full, 0o755)
		case strings.HasPrefix(v, "-> "):
			err = os.Symlink(strings.TrimPrefix(v, "-> "), full)
		default:
			err = os.WriteFile(full, []byte(v), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// build runs Build with the test's temp dir included (/tmp is skipped by default).
func build(t *testing.T, root string, opts Options, traces ...*trace.Trace) *Plan {
	t.Helper()
	opts.Include = append(opts.Include, root)
	plan, err := Build(traces, opts)
	if err != nil {
		t.Fatal(err)
	}
	rules, _ := NewRules(opts.Include, opts.Exclude)
	checkInvariants(t, plan, rules)
	return plan
}

// checkInvariants asserts what the image writer and the loader rely on.
func checkInvariants(t *testing.T, plan *Plan, rules *Rules) {
	t.Helper()
	byPath := entriesByPath(plan)
	if len(byPath) != len(plan.Entries) {
		t.Errorf("duplicate paths in the plan")
	}
	for i, e := range plan.Entries {
		if e.Order != i {
			t.Errorf("%s: order %d at position %d", e.Path, e.Order, i)
		}
		// Every ancestor is a directory entry, except node-local ones
		// (/tmp, /etc, excluded prefixes) and output directories, which have no entry.
		for d := path.Dir(e.Path); ; d = path.Dir(d) {
			a, ok := byPath[d]
			if v, _ := rules.Match(d); !ok && v == Bundle && !slices.Contains(plan.Report.OutputDirs, d) || ok && a.Type != image.TypeDir {
				t.Errorf("%s (%s): ancestor %s is not a directory entry (%v)", e.Path, e.Type, d, a)
			}
			if d == "/" {
				break
			}
		}
		if e.Type == image.TypeDir {
			if got, want := listedNames(e.Listing), readOrder(t, e.Path); !slices.Equal(got, want) {
				t.Errorf("%s: listing %q, want the directory's read order %q", e.Path, got, want)
			}
		}
		if e.Type == image.TypeMissing {
			if parent := byPath[path.Dir(e.Path)]; parent != nil && hasName(parent.Listing, "/"+path.Base(e.Path)) {
				t.Errorf("%s is missing but its directory lists it", e.Path)
			}
		}
	}
}

func entriesByPath(plan *Plan) map[string]*image.Entry {
	m := map[string]*image.Entry{}
	for i := range plan.Entries {
		m[plan.Entries[i].Path] = &plan.Entries[i]
	}
	return m
}

func wantEntry(t *testing.T, plan *Plan, p string, typ image.Type) *image.Entry {
	t.Helper()
	e := entriesByPath(plan)[p]
	if e == nil {
		t.Fatalf("%s not in the plan; plan:\n%s", p, dump(plan))
	}
	if e.Type != typ {
		t.Fatalf("%s is %s, want %s", p, e.Type, typ)
	}
	return e
}

func wantAbsent(t *testing.T, plan *Plan, p string) {
	t.Helper()
	if e := entriesByPath(plan)[p]; e != nil {
		t.Fatalf("%s is in the plan as %s, want it left out", p, e.Type)
	}
}

func dump(plan *Plan) string {
	var b strings.Builder
	for _, e := range plan.Entries {
		b.WriteString("  " + string(e.Type) + " " + e.Path + "\n")
	}
	return b.String()
}

func listedNames(l []image.DirEntry) []string {
	var names []string
	for _, d := range l {
		names = append(names, d.Name)
	}
	return names
}

// readOrder is the names of dir in the order the file system returns them
// (os.File.ReadDir does not sort; os.ReadDir does), read with O_NOATIME as
// the build reads (the tests compare atimes).
func readOrder(t *testing.T, dir string) []string {
	t.Helper()
	f, err := image.OpenSource(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ds, err := f.ReadDir(-1)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range ds {
		names = append(names, d.Name())
	}
	return names
}

// readOrderAll is every name getdents(2) returns for dir, "." and ".."
// included, in its order (an independent decoder of the records).
func readOrderAll(t *testing.T, dir string) []string {
	t.Helper()
	f, err := image.OpenSource(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	buf := make([]byte, 8192)
	for {
		n, err := unix.Getdents(int(f.Fd()), buf)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return names
		}
		for off := 0; off < n; {
			reclen := int(buf[off+16]) | int(buf[off+17])<<8
			name := buf[off+19 : off+reclen]
			names = append(names, string(name[:bytes.IndexByte(name, 0)]))
			off += reclen
		}
	}
}

package view

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/report"
	"github.com/dlbundle/dlbundle/trace"
)

// fixture is a small app: an image of /opt/app (a program, a library, a
// symlink /opt/lib64 -> app/lib), a pilot trace of it, a report of a run.
type fixture struct {
	in Input
}

func writeImage(t *testing.T, entries []image.Entry) (*image.Image, string) {
	t.Helper()
	name := filepath.Join(t.TempDir(), "app.dlimg")
	out, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := image.Write(out, entries, image.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	im, err := image.OpenFile(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { im.Close() })
	return im, name
}

// regular is a bundled file of size bytes, its content in a temporary file.
func regular(t *testing.T, p string, size int, kind image.Kind) image.Entry {
	t.Helper()
	src := filepath.Join(t.TempDir(), "content")
	if err := os.WriteFile(src, bytes.Repeat([]byte{byte(len(p))}, size), 0o644); err != nil {
		t.Fatal(err)
	}
	return image.Entry{Path: p, Type: image.TypeRegular, Mode: 0o100755, Size: int64(size), Kind: kind, SourcePath: src}
}

func dir(p string, names ...string) image.Entry {
	e := image.Entry{Path: p, Type: image.TypeDir, Mode: 0o40755}
	for _, n := range names {
		e.Listing = append(e.Listing, image.DirEntry{Name: n, Type: image.TypeRegular})
	}
	return e
}

func ev(ms int, op trace.Op, p, errno string, size int64) trace.Event {
	e := trace.Event{Rec: "ev", T: int64(ms) * int64(time.Millisecond), PID: 1, Op: op, Path: p, Err: errno}
	if size > 0 {
		e.Size = &size
	}
	return e
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	im, name := writeImage(t, []image.Entry{
		dir("/opt", "app", "lib64"),
		dir("/opt/app", "bin", "lib"),
		dir("/opt/app/bin", "app"),
		regular(t, "/opt/app/bin/app", 1000, image.KindELFExec),
		dir("/opt/app/lib", "libfoo.so"),
		regular(t, "/opt/app/lib/libfoo.so", 3000, image.KindELFShared),
		{Path: "/opt/lib64", Type: image.TypeSymlink, Mode: 0o120777, Target: "app/lib"},
	})
	write := ev(5, trace.OpOpen, "/opt/app/out.txt", "", 0)
	write.Flags = 0x41 // O_WRONLY|O_CREAT: not a lookup
	tr := &trace.Trace{
		Header: trace.Header{Command: []string{"/opt/app/bin/app", "--input", "small"}, Host: "node1", Glibc: "2.36", Start: "2026-11-24T00:00:00Z"},
		Events: []trace.Event{
			ev(0, trace.OpExec, "/opt/app/bin/app", "", 0),
			ev(1, trace.OpOpen, "/opt/lib64/libfoo.so", "", 3000),       // through the image's symlink: answered
			ev(2, trace.OpOpen, "/opt/app/lib/libbar.so", "ENOENT", 0),  // absent from a listed directory: answered
			ev(3, trace.OpStat, "/usr/share/zoneinfo/UTC", "ENOENT", 0), // outside the image: the file system
			ev(4, trace.OpOpen, "/etc/hosts", "", 100),                  // node-local
			write,
			ev(6, trace.OpListdir, "/opt/app/lib", "", 0),
		},
		End: &trace.End{Rec: "end", Exit: 0, Events: 7, WallNS: int64(10 * time.Millisecond)},
	}
	reports := []report.ProcessReport{
		{PID: 10, Exe: "/opt/app/bin/app", Answered: 4, Missing: 1, Passed: 3,
			PassedPaths: []string{"/usr/share/zoneinfo/UTC", "/etc/hosts", "/tmp/job42/input.nml"}},
	}
	return &fixture{in: Input{Traces: []*trace.Trace{tr}, TraceNames: []string{"app.trace"}, Image: im, ImageName: name,
		Reports: reports, ReportNames: []string{"run.report"}, Version: "test"}}
}

func TestComputeFigures(t *testing.T) {
	f, err := Compute(newFixture(t).in)
	if err != nil {
		t.Fatal(err)
	}
	if f.Lookups != 6 || f.Failed != 2 || f.Files != 2 || f.Bytes != 3100 || f.Events != 7 {
		t.Errorf("lookups %d, failed %d, files %d, bytes %d, events %d; want 6, 2, 2, 3100, 7 (the write open is no lookup)",
			f.Lookups, f.Failed, f.Files, f.Bytes, f.Events)
	}
	if f.Duration != int64(10*time.Millisecond) || len(f.Bins) != numBins {
		t.Errorf("duration %d ns in %d bins; want the end record's 10 ms in %d", f.Duration, len(f.Bins), numBins)
	}
	found, failed := 0, 0
	for _, b := range f.Bins {
		found, failed = found+b.Found, failed+b.Failed
	}
	if found != 4 || failed != 2 {
		t.Errorf("bins hold %d found, %d failed; want 4, 2", found, failed)
	}
	var lanes []string
	for _, l := range f.Dirs {
		lanes = append(lanes, fmt.Sprintf("%s:%d/%d", l.Dir, l.Lookups(), l.Failed))
	}
	// In order of first use; the listing counts in the directory it lists.
	if got := strings.Join(lanes, " "); got != "/opt/app/bin:1/0 /opt/lib64:1/0 /opt/app/lib:2/1 /usr/share/zoneinfo:1/1 /etc:1/0" {
		t.Errorf("lanes %s", got)
	}
	if len(f.BigFiles) != 2 || f.BigFiles[0].Path != "/opt/lib64/libfoo.so" || f.BigFiles[1].Path != "/etc/hosts" {
		t.Errorf("big files %+v; want libfoo.so then /etc/hosts, in time order", f.BigFiles)
	}
	if f.Objects != 2 || f.RawBytes != 4000 || f.StoredBytes <= 0 {
		t.Errorf("image: %d objects, %d raw, %d stored; want 2, 4000, > 0", f.Objects, f.RawBytes, f.StoredBytes)
	}
	var parts []string
	for _, p := range f.Prefixes {
		parts = append(parts, fmt.Sprintf("%s:%d", p.Path, p.Raw))
	}
	if got := strings.Join(parts, " "); got != "/opt/app/lib:3000 /opt/app/bin:1000" {
		t.Errorf("prefixes %s; want the two directories, largest first", got)
	}
	s := f.Savings
	if s == nil || s.SharedNative != 5 || s.NodeLocal != 1 || s.SharedExec != 1 || len(s.Unanswered) != 1 || s.Unanswered[0].Path != "/usr/share/zoneinfo" {
		t.Errorf("savings %+v; want 5 native, 1 node-local, 1 left under exec (in /usr/share/zoneinfo)", s)
	}
	if s.Processes != 1 || s.PerProcess != 3 {
		t.Errorf("measured: %d processes, %.1f passed each; want 1, 3", s.Processes, s.PerProcess)
	}
	r := f.Report
	if r == nil || len(r.Lacked) != 1 || len(r.Temporary) != 1 || len(r.NodeLocal) != 1 {
		t.Errorf("report summary %+v; want zoneinfo lacked, /tmp/job42 temporary, /etc/hosts node-local", r)
	}
}

// answers follows the image's symlinks and listings as the shim does.
func TestAnswersLikeTheShim(t *testing.T) {
	im, _ := writeImage(t, []image.Entry{
		dir("/opt", "app", "lib64", "loop"),
		dir("/opt/app", "lib"),
		dir("/opt/app/lib", "libfoo.so"),
		regular(t, "/opt/app/lib/libfoo.so", 10, image.KindELFShared),
		{Path: "/opt/lib64", Type: image.TypeSymlink, Mode: 0o120777, Target: "app/lib"},
		{Path: "/opt/loop", Type: image.TypeSymlink, Mode: 0o120777, Target: "/opt/loop"},
		{Path: "/etc/ld.so.cache", Type: image.TypeExternal},
		{Path: "/srv/gone", Type: image.TypeMissing},
	})
	for p, want := range map[string]bool{
		"/opt/app/lib/libfoo.so":        true,  // bundled
		"/opt/lib64/libfoo.so":          true,  // through a relative symlink
		"/opt/lib64/libbar.so":          true,  // absent from a listed directory: ENOENT
		"/opt/app/lib/libfoo.so/x":      true,  // below a regular file: ENOTDIR
		"/opt/loop/x":                   true,  // ELOOP
		"/srv/gone":                     true,  // a missing entry
		"/srv/gone/below":               true,  // ENOENT below it
		"/etc/ld.so.cache":              false, // external: the node's file system
		"/usr/lib/libc.so.6":            false, // not in the image
		"/srv/other":                    false, // /srv is not listed: unknown
		"/opt/app/lib/../lib/libfoo.so": true,
	} {
		if got := answers(im, p); got != want {
			t.Errorf("answers(%s) = %v, want %v", p, got, want)
		}
	}
}

// Paths and commands come from traces and images anyone may write: the
// page shows them as text, never as markup.
func TestPageEscapesPathsAndCommands(t *testing.T) {
	fx := newFixture(t)
	tr := fx.in.Traces[0]
	tr.Header.Command = []string{"/bin/sh", "-c", `<img src=x onerror="alert(1)">`}
	tr.Events = append(tr.Events, ev(7, trace.OpStat, `/opt/<script>alert("x")</script>/a`, "ENOENT", 0))
	fx.in.Reports[0].PassedPaths = append(fx.in.Reports[0].PassedPaths, `/srv/"><svg onload=alert(2)>`)
	var b bytes.Buffer
	if err := Write(&b, fx.in); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, bad := range []string{"<script>", "<img src=x", "<svg onload"} {
		if strings.Contains(page, bad) {
			t.Errorf("page holds %q unescaped", bad)
		}
	}
	for _, want := range []string{"&lt;script&gt;", "&lt;img src=x onerror=", "&lt;svg onload=alert(2)&gt;"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks the escaped text %q", want)
		}
	}
	if strings.Contains(page, "<script") || strings.Contains(page, "http://") || strings.Contains(page, "https://") {
		t.Errorf("page has a script or an external reference; it must be self-contained and script-free")
	}
}

// An image of torch's size (~1,800 objects in hundreds of directories) and a
// trace of thousands of lookups give bounded charts: at most numPrefixes
// bars, numDirs+1 lanes, and a page of reasonable size.
func TestPageStaysReadableAtScale(t *testing.T) {
	var entries []image.Entry
	var events []trace.Event
	content := regular(t, "/x", 100, image.KindPySource).SourcePath
	for d := 0; d < 300; d++ {
		dirPath := fmt.Sprintf("/usr/lib/python3/dist-packages/torch/mod%03d", d)
		for i := 0; i < 6; i++ {
			p := fmt.Sprintf("%s/f%d.py", dirPath, i)
			entries = append(entries, image.Entry{Path: p, Type: image.TypeRegular, Mode: 0o100644, Size: 100, Kind: image.KindPySource, SourcePath: content})
			events = append(events, ev(d, trace.OpStat, p+"c", "ENOENT", 0), ev(d, trace.OpOpen, p, "", 100))
		}
	}
	im, name := writeImage(t, entries)
	in := Input{Traces: []*trace.Trace{{Header: trace.Header{Command: []string{"python3"}}, Events: events}},
		TraceNames: []string{"big.trace"}, Image: im, ImageName: name}
	f, err := Compute(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Prefixes) > numPrefixes || len(f.Dirs) > numDirs || f.OtherDirs.Dirs != 300-numDirs {
		t.Errorf("%d prefixes, %d lanes + %d other directories; want at most %d, %d + the rest", len(f.Prefixes), len(f.Dirs), f.OtherDirs.Dirs, numPrefixes, numDirs)
	}
	var objects int
	for _, p := range f.Prefixes {
		objects += p.Objects
	}
	if objects != 1800 {
		t.Errorf("prefixes hold %d objects, want all 1800", objects)
	}
	var b bytes.Buffer
	if err := WriteFigures(&b, f, in); err != nil {
		t.Fatal(err)
	}
	if b.Len() > 400<<10 {
		t.Errorf("page is %d bytes for 3,600 lookups and 1,800 objects; want under 400 KiB", b.Len())
	}
}

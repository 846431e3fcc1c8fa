package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/image/registry"
	"github.com/dlbundle/dlbundle/internal/units"
	"github.com/dlbundle/dlbundle/internal/untrusted"
)

// InspectCmd summarises or lists an image.
type InspectCmd struct {
	Image    string        `arg:"" help:"Image file (.dlimg), or a registry reference oci://REGISTRY/REPO:TAG (or @sha256:...): only the manifest, footer and table of contents are fetched."`
	Insecure bool          `help:"With an oci:// reference: talk plain http to the registry (a lab registry without TLS)."`
	List     bool          `short:"l" help:"List every entry in load order: order, type, kind, size, compressed size, path."`
	JSON     bool          `help:"Print JSON instead of text (with --list: the entries too)."`
	Top      int           `default:"10" help:"How many of the largest objects and missing paths to show."`
	HTML     string        `name:"html" placeholder:"FILE" help:"Write a page (one self-contained HTML file) that draws where start-up goes: the image's bytes by prefix and, with --trace and --report, the pilot's lookups over time and by directory, what exec saves per rank, what the image lacked."`
	Traces   []string      `name:"trace" placeholder:"TRACE" type:"path" sep:"none" help:"With --html: the pilot's trace(s) the image was built from (repeatable; the name given to 'trace -o' under a launcher means its per-rank files NAME.0, NAME.1...)."`
	Reports  []string      `name:"report" placeholder:"FILE" type:"existingfile" sep:"none" help:"With --html: report file(s) of 'dlbundle exec --report' (repeatable)."`
	Untraced time.Duration `placeholder:"DURATION" help:"With --html: the app's start-up measured without dlbundle (e.g. 'time ./app': 60ms); the page then uses it instead of estimating it from the pilot with ptrace's share taken out."`
}

// Help is shown by `dlbundle inspect --help`.
func (c *InspectCmd) Help() string {
	return `Shows what an image holds: its architecture, objects by kind, raw and
compressed bytes, the largest objects, paths recorded as missing, directories,
and the pilot run it was built from (command, host, glibc). The image's table
of contents is checked when it is opened; contents are not decompressed (use
dlbundle verify).

Text the image chose (paths, symlink targets, the pilot's command line) is
printed as it is when printable, and Go-quoted otherwise ("a\nb"): a control
character in a path cannot forge a line of output. --json escapes as JSON does.

  dlbundle inspect app.dlimg
  dlbundle inspect --list app.dlimg | grep numpy
  dlbundle inspect --json app.dlimg | jq .by_kind
  dlbundle inspect --html app.html --trace dlbundle.trace --report run1.report app.dlimg

--html draws it for people: open the file in any browser (no network needed).`
}

type kindStats struct {
	Count      int   `json:"count"`
	RawBytes   int64 `json:"raw_bytes"`
	Compressed int64 `json:"compressed_bytes"`
}

type inspectObject struct {
	Path       string `json:"path"`
	Kind       string `json:"kind"`
	Size       int64  `json:"size"`
	Compressed int64  `json:"compressed"`
}

type inspectSummary struct {
	Image        string                `json:"image"`
	Size         int64                 `json:"size"`
	Digest       string                `json:"toc_digest"`
	Arch         string                `json:"arch"`
	Glibc        *image.Glibc          `json:"glibc"` // null: the image bundles no ld.so
	GlibcError   string                `json:"glibc_error,omitempty"`
	Entries      int                   `json:"entries"`
	ByType       map[string]int        `json:"by_type"`
	ByKind       map[string]*kindStats `json:"by_kind"`
	RawBytes     int64                 `json:"raw_bytes"`
	DataBytes    int64                 `json:"data_bytes"`
	DedupedBytes int64                 `json:"deduped_bytes"`
	Largest      []inspectObject       `json:"largest"`
	Missing      []string              `json:"missing"`
	Directories  []string              `json:"directories"`
	Pilots       []json.RawMessage     `json:"pilots"`
	Build        map[string]string     `json:"build"`
	List         []image.Entry         `json:"list,omitempty"`
}

// Run prints the summary or the listing.
func (c *InspectCmd) Run() error {
	im, err := c.open()
	if err != nil {
		return err
	}
	defer im.Close()
	if c.HTML != "" {
		for _, t := range c.Traces {
			if err := missingInput(t, "trace"); err != nil {
				return err
			}
		}
		c.Traces = withRankFiles(c.Traces)
		return writePage(c.HTML, c.Traces, c.Image, im, c.Reports, c.Untraced)
	}
	if len(c.Traces) > 0 || len(c.Reports) > 0 || c.Untraced != 0 {
		return usageError{"--trace, --report and --untraced go with --html FILE (the page they are drawn on)"}
	}
	s := summarise(c.Image, im)
	if c.JSON {
		if c.List {
			s.List = im.Entries()
		}
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(s)
	}
	if c.List {
		return printList(os.Stdout, im)
	}
	printSummary(os.Stdout, s, c.Top)
	return nil
}

// open opens a local image file, or reads an image's table of contents from a
// registry by range requests (no bulk download).
func (c *InspectCmd) open() (*image.Image, error) {
	if !registry.IsRef(c.Image) {
		return image.OpenFile(c.Image)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	info, err := registry.Inspect(ctx, c.Image, registry.Options{Insecure: c.Insecure})
	if err != nil {
		return nil, err
	}
	if info.Image == nil {
		var rerr *image.ReadError
		if !errors.As(info.TOCError, &rerr) { // read fine, but not a valid image
			return nil, fmt.Errorf("%s: the image in the registry is corrupt or was tampered with: %v; push a good image again", c.Image, info.TOCError)
		}
		return nil, fmt.Errorf("%s: the registry does not serve byte ranges, so the table of contents cannot be read without the whole image (%v); use 'dlbundle pull %s -o app.dlimg' and inspect the file", c.Image, info.TOCError, c.Image)
	}
	return info.Image, nil
}

// compressed is the bytes of e's frames in the image.
func compressed(e *image.Entry) int64 {
	var n int64
	for _, f := range e.Frames {
		n += f.CSize
	}
	return n
}

func summarise(name string, im *image.Image) *inspectSummary {
	s := &inspectSummary{Image: name, Size: im.Size(), Digest: im.TOCDigest(), Arch: im.Arch(), ByType: map[string]int{},
		ByKind: map[string]*kindStats{}, Pilots: im.Pilots(), Build: im.BuildInfo(), DataBytes: im.DataSize(),
		Missing: []string{}, Directories: []string{}}
	if g, err := im.Glibc(); err != nil {
		s.GlibcError = err.Error()
	} else {
		s.Glibc = g
	}
	stored := map[int64]bool{} // first frame offset of content already counted
	es := im.Entries()
	s.Entries = len(es)
	for i := range es {
		e := &es[i]
		s.ByType[string(e.Type)]++
		switch e.Type {
		case image.TypeMissing:
			s.Missing = append(s.Missing, e.Path)
		case image.TypeDir:
			s.Directories = append(s.Directories, e.Path)
		case image.TypeRegular:
			kind := string(e.Kind)
			if kind == "" {
				kind = "unknown"
			}
			k := s.ByKind[kind]
			if k == nil {
				k = &kindStats{}
				s.ByKind[kind] = k
			}
			k.Count++
			k.RawBytes += e.Size
			s.RawBytes += e.Size
			if len(e.Frames) > 0 && stored[e.Frames[0].Offset] {
				s.DedupedBytes += e.Size
				continue
			}
			if len(e.Frames) > 0 {
				stored[e.Frames[0].Offset] = true
			}
			k.Compressed += compressed(e)
			s.Largest = append(s.Largest, inspectObject{e.Path, kind, e.Size, compressed(e)})
		}
	}
	sort.SliceStable(s.Largest, func(a, b int) bool { return s.Largest[a].Size > s.Largest[b].Size })
	if len(s.Largest) > 20 {
		s.Largest = s.Largest[:20]
	}
	return s
}

func printSummary(w io.Writer, s *inspectSummary, top int) {
	fmt.Fprintf(w, "image      %s (%s)\n", s.Image, units.Bytes(s.Size))
	fmt.Fprintf(w, "identity   %s\n", s.Digest)
	fmt.Fprintf(w, "arch       %s\n", s.Arch)
	switch g := s.Glibc; {
	case s.GlibcError != "":
		fmt.Fprintf(w, "glibc      cannot be read: %s\n", s.GlibcError)
	case g == nil:
		fmt.Fprintf(w, "glibc      none bundled (no ld.so in the image)\n")
	default:
		fmt.Fprintf(w, "glibc      %s, ld.so %s (build id %s), libc %s, kernel >= %s\n",
			orUnknown(g.Version), q(g.Ldso), orUnknown(g.LdsoBuildID), q(orUnknown(g.Libc)), orUnknown(g.MinKernel))
	}
	for _, p := range s.Pilots {
		var h struct {
			Command []string `json:"command"`
			Host    string   `json:"host"`
			Glibc   string   `json:"glibc"`
			Kernel  string   `json:"kernel"`
			Start   string   `json:"start"`
			Rank    string   `json:"rank"`
		}
		if json.Unmarshal(p, &h) == nil {
			rank := ""
			if h.Rank != "" {
				rank = " rank " + q(h.Rank)
			}
			args := make([]string, len(h.Command))
			for i, a := range h.Command {
				args[i] = q(a)
			}
			fmt.Fprintf(w, "pilot      %s\n           on %s%s, glibc %s, kernel %s, %s\n",
				strings.Join(args, " "), q(h.Host), rank, q(h.Glibc), q(h.Kernel), q(h.Start))
		}
	}
	if len(s.Build) > 0 {
		keys := make([]string, 0, len(s.Build))
		for k := range s.Build {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var kv []string
		for _, k := range keys {
			kv = append(kv, q(k+"="+s.Build[k]))
		}
		fmt.Fprintf(w, "build      %s\n", strings.Join(kv, " "))
	}
	fmt.Fprintf(w, "\nentries    %d:", s.Entries)
	for _, t := range []image.Type{image.TypeRegular, image.TypeDir, image.TypeSymlink, image.TypeMissing, image.TypeExternal} {
		fmt.Fprintf(w, " %d %s", s.ByType[string(t)], t)
	}
	ratio := 0.0
	if s.RawBytes > 0 {
		ratio = float64(s.DataBytes) / float64(s.RawBytes)
	}
	fmt.Fprintf(w, "\ncontent    %s raw, %s compressed data (%.1f%%), %s stored once for several paths\n",
		units.Bytes(s.RawBytes), units.Bytes(s.DataBytes), 100*ratio, units.Bytes(s.DedupedBytes))
	fmt.Fprintf(w, "index      %s (table of contents and footer)\n", units.Bytes(s.Size-s.DataBytes))

	fmt.Fprintf(w, "\n%-14s %7s %12s %12s\n", "kind", "objects", "raw", "compressed")
	kinds := make([]string, 0, len(s.ByKind))
	for k := range s.ByKind {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(a, b int) bool { return s.ByKind[kinds[a]].RawBytes > s.ByKind[kinds[b]].RawBytes })
	for _, k := range kinds {
		st := s.ByKind[k]
		fmt.Fprintf(w, "%-14s %7d %12s %12s\n", k, st.Count, units.Bytes(st.RawBytes), units.Bytes(st.Compressed))
	}
	if len(s.Largest) > 0 {
		fmt.Fprintf(w, "\nlargest objects\n")
		for i, o := range s.Largest {
			if i == top {
				break
			}
			fmt.Fprintf(w, "  %10s  %10s  %-12s %s\n", units.Bytes(o.Size), units.Bytes(o.Compressed), o.Kind, q(o.Path))
		}
	}
	fmt.Fprintln(w)
	printPaths(w, "missing paths (known not to exist)", s.Missing, top)
	printPaths(w, "directories with complete listings", s.Directories, top)
}

// printPaths prints a titled count and the first top paths.
func printPaths(w io.Writer, title string, paths []string, top int) {
	fmt.Fprintf(w, "%s: %d\n", title, len(paths))
	for i, p := range paths {
		if i == top {
			fmt.Fprintf(w, "  ... %d more (--list)\n", len(paths)-top)
			break
		}
		fmt.Fprintf(w, "  %s\n", q(p))
	}
}

func printList(w io.Writer, im *image.Image) error {
	fmt.Fprintf(w, "%6s %-8s %-12s %10s %10s  %s\n", "order", "type", "kind", "size", "stored", "path")
	for i := range im.Entries() {
		e := &im.Entries()[i]
		extra := ""
		if e.Type == image.TypeSymlink {
			extra = " -> " + q(e.Target)
		}
		size, stored := "-", "-"
		if e.Type == image.TypeRegular {
			size, stored = fmt.Sprint(e.Size), fmt.Sprint(compressed(e))
		}
		if _, err := fmt.Fprintf(w, "%6d %-8s %-12s %10s %10s  %s%s\n", e.Order, e.Type, e.Kind, size, stored, q(e.Path), extra); err != nil {
			return err
		}
	}
	return nil
}

// q prints text the image chose: unchanged when printable, Go-quoted
// otherwise (a newline in a path must not forge an output line).
func q(s string) string { return untrusted.Quote(s) }

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

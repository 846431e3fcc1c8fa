package main

import (
	"bufio"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/image/registry"
	"github.com/dlbundle/dlbundle/internal/outfile"
	"github.com/dlbundle/dlbundle/internal/units"
	"github.com/dlbundle/dlbundle/internal/version"
	"github.com/dlbundle/dlbundle/squash"
	"github.com/dlbundle/dlbundle/trace"
)

// BuildCmd packs what one or more pilot traces loaded into an image.
type BuildCmd struct {
	Output       string   `short:"o" placeholder:"IMAGE" help:"Image file to write (e.g. app.dlimg). Written to a temporary file beside it and renamed when complete."`
	Traces       []string `arg:"" optional:"" name:"trace" type:"path" help:"Trace files and report files, mixed (default: every trace in the directory: ./dlbundle.trace, ./dlbundle.N.trace, and the per-rank .RANK files). The name given to 'trace -o NAME' under a launcher means its per-rank files NAME.0, NAME.1..."`
	From         string   `placeholder:"IMAGE" type:"existingfile" help:"Start from this image's entries (no traces needed) and fold in what the traces and reports add: dlbundle build -o new.dlimg --from app.dlimg run.report. The image's --include/--exclude are kept."`
	StatOnlyMax  int64    `name:"stat-only-max" placeholder:"BYTES" default:"0" help:"Bundle files the pilot only stat'd up to this size (default 2097152, 2 MiB); larger ones stay on the file system as external entries."`
	Level        int      `default:"3" help:"zstd level, 1 (fastest) to 19 (smallest)."`
	Workers      int      `default:"0" help:"Parallel compressors (0 = all cores)."`
	Include      []string `sep:"none" placeholder:"PREFIX" help:"Bundle paths under PREFIX although a default rule leaves them out (e.g. --include /etc/myapp). Repeatable; the longest matching prefix wins."`
	Exclude      []string `sep:"none" placeholder:"PREFIX" help:"Never bundle paths under PREFIX; they stay on the file system (e.g. --exclude /opt/site-config). Repeatable."`
	AllowChanged bool     `help:"Bundle files that changed since the pilot as they are now, instead of leaving them out."`
	DryRun       bool     `name:"dry-run" help:"Write no image: list the plan (entry, type, kind, size, path) and the summary, to try --include/--exclude."`
	Push         string   `placeholder:"REF" help:"After writing the image, push it to an OCI registry as [oci://]REGISTRY/REPO:TAG (as 'dlbundle push' does) and print the pinned reference."`
	Insecure     bool     `help:"With --push: talk plain http to the registry (a lab registry without TLS)."`
	Force        bool     `help:"Write -o over an existing file that is not a dlbundle image (build refuses by default: it may be a trace or anything else)."`

	summary io.Writer // where the summary goes; nil means stdout (tests, benchmarks)
}

// Help is shown by `dlbundle build --help` below the usage line.
func (c *BuildCmd) Help() string {
	return `Reads the traces of pilot runs, decides what to bundle, and writes one image:

  dlbundle trace -- ./myapp        # pilot: writes ./dlbundle.trace (the next: ./dlbundle.2.trace)
  dlbundle build -o app.dlimg      # this command: every pilot's trace in the directory
  dlbundle inspect app.dlimg       # what went in
  dlbundle build --dry-run --exclude /opt/site   # list the plan, write nothing

Fold in what runs lacked, with no new pilot: --from takes an image's entries,
and reports (what exec's processes passed to the file system: the node's
records, or --report files) add the files, listings, failed lookups and
libraries the runs went to the file system for. Traces may be mixed in.

  dlbundle report                  # what the image lacked, and the command:
  dlbundle build -o app.dlimg --from app.dlimg /dev/shm/dlbundle-$UID/records/*.report

What goes in (see docs/squash.md):
  - regular files the pilot read or executed, in the order it first used them;
    several traces (ranks) are merged, each path once;
  - symlinks along those paths (/lib -> usr/lib) and the directories on the way,
    with their complete listings as they are now;
  - names the pilot looked up and did not find, where the directory's listing is
    in the image (so the job's ranks do not ask the file system again);
  - Python bytecode caches the pilot wrote, when still valid for their source.
What stays out:
  - files written, created or removed during the pilot (outputs);
  - /proc, /sys, /dev, /run, /tmp, /var/tmp; /etc is node-local configuration
    and is recorded as "external" (lookups go to the node's file system);
  - files that changed or vanished since the pilot (reported; re-run the pilot,
    or use --allow-changed).

Who may read the image: no more users than may read every input. The image's
mode is what the umask allows, less the group and other bits of any input that
some users cannot read (its mode, or a directory above it); the summary names
those private inputs (leave them out with --exclude). As root, a user's traces
are built as that user: the image holds only what the user may read.

The same traces and files give a byte-identical image; set SOURCE_DATE_EPOCH to
record a build time.`
}

// Run builds the plan and writes the image.
func (c *BuildCmd) Run() error {
	if c.Output == "" && !c.DryRun {
		return usageError{"name the image to write with -o, e.g. -o app.dlimg (or --dry-run to see the plan)"}
	}
	if len(c.Traces) == 0 && c.From == "" {
		var err error
		if c.Traces, err = squash.DefaultTraces("."); err != nil {
			return err
		}
	}
	c.Traces = withRankFiles(c.Traces)
	in, err := c.sortInputs()
	if err != nil {
		return err
	}
	if in.image != nil {
		defer in.image.Close()
	}
	paths := in.all()
	if os.Geteuid() == 0 {
		// Root reads no file on a user's behalf (buildaccess.go).
		owner, err := traceOwner(paths)
		if err != nil {
			return err
		}
		if owner != 0 {
			return buildAs(owner)
		}
	}
	if !c.DryRun {
		// the image of --from may be rebuilt in place; traces and reports not
		if err := checkOutput(c.Output, append(in.traces, in.reports...), c.Force); err != nil {
			return err
		}
	}
	warnings := 0
	warn := func(msg string) {
		warnings++
		fmt.Fprintln(os.Stderr, "warning:", msg)
	}
	opts := squash.Options{
		Include: c.Include, Exclude: c.Exclude, AllowChanged: c.AllowChanged, Warn: warn, StatOnlyMax: c.StatOnlyMax,
	}
	traces, err := in.load(&opts)
	if err != nil {
		return err
	}
	for _, f := range append(in.all(), c.Output) {
		if abs, err := filepath.Abs(f); err == nil && f != "" {
			opts.Own = append(opts.Own, abs)
		}
	}
	c.Include, c.Exclude = opts.Include, opts.Exclude // recorded in the image
	plan, err := squash.Build(traces, opts)
	if err != nil {
		return err
	}
	summary := c.summary
	if summary == nil {
		summary = os.Stdout
	}
	if c.DryRun {
		printPlan(summary, in.phrase(), plan)
		imageAccess(plan, nil).print(summary, "would be written", c.Push != "")
		return nil
	}
	if err := checkSomethingToBundle(plan, traces); err != nil {
		return err
	}
	info, err := c.buildInfo(len(in.traces))
	if err != nil {
		return err
	}

	out, err := newPartialImage(c.Output)
	if err != nil {
		return err
	}
	defer out.abort()
	access := imageAccess(plan, out.f)
	bar := newProgress("building")
	bw := bufio.NewWriterSize(out.f, 1<<20)
	stats, err := image.Write(bw, plan.Entries, image.WriteOptions{
		Level: c.Level, Workers: c.Workers, Pilots: plan.Pilots, Build: info,
		Progress: bar.callback(), Warn: warn,
	})
	bar.finish()
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", c.Output, err)
	}
	if err := out.commit(access.mode); err != nil {
		return err
	}
	printBuildSummary(summary, c.Output, in.phrase(), plan, stats, warnings)
	access.print(summary, "written", c.Push != "")
	if c.Push != "" {
		return c.push()
	}
	return nil
}

// push uploads the finished image, as `dlbundle push` does.
func (c *BuildCmd) push() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	flags := RegistryFlags{Insecure: c.Insecure, Timeout: 30 * time.Second}
	opts, bar := flags.options("push " + c.Output)
	d, err := registry.Push(ctx, c.Output, c.Push, opts)
	bar.finish()
	if err != nil {
		return fmt.Errorf("image %s was written, but the push failed: %w (retry with 'dlbundle push %s %s')", c.Output, err, c.Output, c.Push)
	}
	pinned, err := registry.Pin(c.Push, d)
	if err != nil {
		return err
	}
	fmt.Println(registry.Scheme + pinned)
	return nil
}

// checkSomethingToBundle refuses to write an image without content (an app
// run from /tmp, say), saying why the files were left out, or that the app
// is a static program, for which no image helps.
func checkSomethingToBundle(plan *squash.Plan, traces []*trace.Trace) error {
	for _, e := range plan.Entries {
		if e.Type == image.TypeRegular {
			return nil
		}
	}
	if static, others := staticPrograms(traces); len(static) > 0 {
		msg := fmt.Sprintf("nothing to gain: %s is statically linked (no program interpreter, no shared libraries): "+
			"it loads nothing at start-up that an image could serve, so run it as it is, without dlbundle", strings.Join(static, ", "))
		if others == 0 {
			return errors.New(msg)
		}
		// It read files too (an input deck in /tmp): those may matter,
		// and what left them out is said below.
		msg += fmt.Sprintf("; it also read %d other files, left out: ", others)
		return errors.New(msg + strings.TrimPrefix(nothingToBundle(plan), "nothing to bundle: "))
	}
	return errors.New(nothingToBundle(plan))
}

// staticPrograms are the programs the traces exec'd when every one of them
// is a static ELF executable (no PT_INTERP, no DT_NEEDED): dlbundle serves
// ld.so's search and the files an app opens, and such a program has no
// ld.so. others counts the regular files they opened besides themselves
// (outside /proc, /sys, /dev). A script (its interpreter is dynamic) or a
// program that cannot be read gives nil.
func staticPrograms(traces []*trace.Trace) (static []string, others int) {
	seen := map[string]bool{}
	opened := map[string]bool{}
	for _, t := range traces {
		for _, ev := range t.Events {
			switch {
			case ev.Op == trace.OpExec && ev.Err == "" && ev.Path != "" && !seen[ev.Path]:
				seen[ev.Path] = true
				if !isStaticELF(ev.Path) {
					return nil, 0
				}
				static = append(static, ev.Path)
			case ev.Op == trace.OpOpen && ev.Err == "" && !ev.Dir && ev.Path != "" && !isPseudoFS(ev.Path):
				opened[ev.Path] = true
			}
		}
	}
	for p := range opened {
		if !seen[p] {
			others++
		}
	}
	return static, others
}

// isStaticELF reports whether path is an ELF executable that needs no
// dynamic loader: no PT_INTERP program header and no DT_NEEDED entry.
func isStaticELF(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	needed, err := f.ImportedLibraries()
	return err == nil && len(needed) == 0
}

func isPseudoFS(p string) bool {
	for _, pre := range []string{"/proc", "/sys", "/dev"} {
		if p == pre || strings.HasPrefix(p, pre+"/") {
			return true
		}
	}
	return false
}

// nothingToBundle says why a plan holds no file: what left each out.
func nothingToBundle(plan *squash.Plan) string {
	var why []string
	for _, r := range plan.Report.SkippedReasons() {
		why = append(why, fmt.Sprintf("%d %s", plan.Report.Skipped[r], r))
		if under := underPrefixes(plan.Report, r, 3); under != "" {
			why[len(why)-1] += ": " + under
		}
	}
	if len(why) == 0 {
		why = append(why, "the traces record no file the app read")
	}
	msg := "nothing to bundle: " + strings.Join(why, "; ")
	if inc := plan.Report.SkippedPrefixes(squash.ReasonTempDir); len(inc) > 0 {
		msg += fmt.Sprintf("; if that is the app's own tree, build with --include %s", inc[0].Prefix)
	}
	return msg
}

// underPrefixes names, for a reason a default prefix rule gave, where the
// paths it left out are ("34 under /tmp/pynamic-build"), at most max
// prefixes; only for temporary directories, where --include PREFIX is the
// fix and the prefix is the user's to name.
func underPrefixes(rep squash.Report, reason string, max int) string {
	if reason != squash.ReasonTempDir {
		return ""
	}
	var parts []string
	ps := rep.SkippedPrefixes(reason)
	for i, p := range ps {
		if i == max {
			parts = append(parts, fmt.Sprintf("%d more prefixes", len(ps)-max))
			break
		}
		parts = append(parts, fmt.Sprintf("%d under %s (--include %s)", p.Paths, p.Prefix, p.Prefix))
	}
	return strings.Join(parts, ", ")
}

// buildInfo is stored in the image; it holds no wall-clock time unless
// SOURCE_DATE_EPOCH asks for one, so that builds are reproducible.
func (c *BuildCmd) buildInfo(traces int) (map[string]string, error) {
	info := map[string]string{
		"dlbundle": version.Version,
		"level":    strconv.Itoa(c.Level),
		"traces":   strconv.Itoa(traces),
	}
	if len(c.Include) > 0 {
		info["include"] = strings.Join(c.Include, ":")
	}
	if len(c.Exclude) > 0 {
		info["exclude"] = strings.Join(c.Exclude, ":")
	}
	if c.AllowChanged {
		info["allow_changed"] = "true"
	}
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a number of seconds since 1970", s)
		}
		info["time"] = time.Unix(sec, 0).UTC().Format(time.RFC3339)
	}
	return info, nil
}

// partialImage is a temporary file beside the target, renamed over it on
// commit and removed otherwise (also on SIGINT/SIGTERM): no partial image
// ever carries the target's name.
type partialImage struct {
	f      *os.File
	out    *outfile.File
	target string
	done   bool
	sigs   chan os.Signal
}

// newPartialImage opens the output through package outfile: the path walked
// by the trust rule, a device or FIFO (-o /dev/null) written to, never
// replaced; else a temporary file beside the target (stripe.go: Lustre
// striping).
func newPartialImage(target string) (*partialImage, error) {
	if st, err := os.Stat(target); err == nil && st.IsDir() {
		return nil, fmt.Errorf("-o %s is a directory; name the image file, e.g. -o %s", target, filepath.Join(target, "app.dlimg"))
	}
	out, err := outfile.CreateWith(target, "image", "-o", func(dir, pattern string) (*os.File, error) {
		return createImageFile(dir, pattern, os.Stderr)
	})
	if err != nil {
		return nil, err
	}
	a := &partialImage{f: out.File, out: out, target: target, sigs: make(chan os.Signal, 1)}
	signal.Notify(a.sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		if _, ok := <-a.sigs; ok {
			if !out.Direct() {
				os.Remove(out.File.Name())
			}
			os.Exit(130)
		}
	}()
	return a, nil
}

func (a *partialImage) commit(mode os.FileMode) error {
	if !a.out.Direct() {
		if err := a.f.Sync(); err != nil {
			return fmt.Errorf("writing %s: %v", a.target, err)
		}
	}
	if err := a.out.Commit(mode); err != nil {
		return fmt.Errorf("cannot put the image at %s: %v", a.target, err)
	}
	a.done = true
	return nil
}

func (a *partialImage) abort() {
	signal.Stop(a.sigs)
	close(a.sigs)
	if !a.done {
		a.out.Discard()
	}
}

// checkOutput refuses an -o that would destroy something that is not an
// image: one of the input traces (always: the build reads them, then would
// replace one with its output), or any existing file without a dlbundle
// footer unless --force. An empty file (mktemp) holds nothing to lose, and an
// image (any version, even a corrupt one) is what -o is for.
func checkOutput(target string, traces []string, force bool) error {
	st, err := os.Stat(target)
	if err != nil {
		return nil // missing: nothing to overwrite; other errors surface when writing
	}
	for _, tr := range traces {
		if ts, err := os.Stat(tr); err == nil && os.SameFile(st, ts) {
			return fmt.Errorf("-o %s is one of the input traces; name the image differently, e.g. -o app.dlimg", target)
		}
	}
	if force || !st.Mode().IsRegular() || st.Size() == 0 {
		return nil // a directory is refused by newPartialImage, with its own advice
	}
	if ok, err := hasImageFooter(target, st.Size()); err != nil || !ok {
		why := "it is not a dlbundle image (no DLBUNDLE footer)"
		if err != nil {
			why = fmt.Sprintf("cannot tell whether it is a dlbundle image: %v", err)
		}
		return fmt.Errorf("-o %s exists and %s; refusing to overwrite it: choose another -o, or --force", target, why)
	}
	return nil
}

// hasImageFooter reports whether the file ends with the footer frame's
// magics (docs/SPEC.md 1.1): only those, so that an image of another format
// version or with a damaged table of contents may still be rebuilt in place.
func hasImageFooter(p string, size int64) (bool, error) {
	const footerSize = 72
	if size < footerSize {
		return false, nil
	}
	f, err := os.Open(p)
	if err != nil {
		return false, err
	}
	defer f.Close()
	b := make([]byte, footerSize)
	if _, err := f.ReadAt(b, size-footerSize); err != nil {
		return false, err
	}
	return string(b[0:4]) == "\x5f\x2a\x4d\x18" && string(b[8:16]) == "DLBUNDLE", nil
}

// printPlan lists a plan's entries in load order, then what a build of it
// would hold (--dry-run).
func printPlan(w io.Writer, from string, plan *squash.Plan) {
	var raw int64
	for _, e := range plan.Entries {
		line := fmt.Sprintf("%5d %-8s %-12s %10d %s", e.Order, e.Type, e.Kind, e.Size, e.Path)
		if e.Type == image.TypeSymlink {
			line += " -> " + e.Target
		}
		fmt.Fprintln(w, line)
		raw += e.Size
	}
	fmt.Fprintf(w, "plan from %s (%d events, %d paths); no image written (--dry-run)\n",
		from, plan.Report.Events, plan.Report.Paths)
	printPlanSummary(w, plan, fmt.Sprintf("content: %s to compress", units.Bytes(raw)))
}

func printBuildSummary(w io.Writer, output string, from string, plan *squash.Plan, st image.WriteStats, warnings int) {
	fmt.Fprintf(w, "wrote %s from %s (%d events, %d paths)\n", output, from, plan.Report.Events, plan.Report.Paths)
	ratio := 0.0
	if st.StoredBytes > 0 {
		ratio = float64(st.RawBytes) / float64(st.StoredBytes)
	}
	printPlanSummary(w, plan, fmt.Sprintf("content: %s raw, %s image (%.2fx), %s stored once for several paths",
		units.Bytes(st.RawBytes), units.Bytes(st.StoredBytes), ratio, units.Bytes(st.DedupedBytes)))
	if warnings > 0 {
		fmt.Fprintf(w, "  %d warning(s), see above\n", warnings)
	}
}

// printPlanSummary: entries by type, files by kind, the content line, what
// was left out and why.
func printPlanSummary(w io.Writer, plan *squash.Plan, content string) {
	byType := map[image.Type]int{}
	kinds := map[image.Kind]int{}
	kindBytes := map[image.Kind]int64{}
	for _, e := range plan.Entries {
		byType[e.Type]++
		if e.Type == image.TypeRegular {
			kinds[e.Kind]++
			kindBytes[e.Kind] += e.Size
		}
	}
	var counts []string
	for _, t := range []image.Type{image.TypeRegular, image.TypeDir, image.TypeSymlink, image.TypeMissing, image.TypeExternal} {
		counts = append(counts, fmt.Sprintf("%d %s", byType[t], t))
	}
	fmt.Fprintf(w, "  %d entries: %s\n", len(plan.Entries), strings.Join(counts, ", "))
	var ks []image.Kind
	for k := range kinds {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		if kindBytes[ks[i]] != kindBytes[ks[j]] {
			return kindBytes[ks[i]] > kindBytes[ks[j]]
		}
		return ks[i] < ks[j]
	})
	for _, k := range ks {
		fmt.Fprintf(w, "  %-13s %5d files %10s\n", k, kinds[k], units.Bytes(kindBytes[k]))
	}
	fmt.Fprintln(w, "  "+content)
	rep := plan.Report
	if len(rep.Skipped) > 0 {
		fmt.Fprintln(w, "  not bundled:")
		for _, r := range rep.SkippedReasons() {
			fmt.Fprintf(w, "    %5d  %s\n", rep.Skipped[r], r)
			if r != squash.ReasonTempDir {
				continue
			}
			// Name where they are, so that the fix can be copied.
			ps := rep.SkippedPrefixes(r)
			for i, p := range ps {
				if i == 3 {
					fmt.Fprintf(w, "           ... and %d more prefixes\n", len(ps)-3)
					break
				}
				fmt.Fprintf(w, "           %5d under %s: to bundle them, --include %s\n", p.Paths, p.Prefix, p.Prefix)
			}
		}
	}
	if len(rep.PycCaches) > 0 {
		fmt.Fprintf(w, "  %d bytecode cache(s) written by the pilot, valid now, bundled\n", len(rep.PycCaches))
	}
	for _, t := range rep.Incomplete {
		fmt.Fprintf(w, "  note: %s has no end record: the pilot was cut short, the image may lack what it did not reach\n", t)
	}
}

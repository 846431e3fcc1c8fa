package report

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"

	"github.com/dlbundle/dlbundle/internal/units"
	"github.com/dlbundle/dlbundle/internal/untrusted"
	"github.com/dlbundle/dlbundle/squash"
)

// ProcessReport is one line of a DLBUNDLE_REPORT file: what one process's
// shim did (loader/shim/report.c writes it at exit).
type ProcessReport struct {
	// Run names the launch (dlbundle exec's DLBUNDLE_RUN: a job step, an
	// mpirun); "" in reports of older shims.
	Run         string   `json:"run,omitempty"`
	PID         int      `json:"pid"`
	Exe         string   `json:"exe"`
	Answered    int64    `json:"answered"`     // lookups answered from the table (bundled)
	Missing     int64    `json:"missing"`      // lookups answered as known missing (ENOENT/ENOTDIR)
	Passed      int64    `json:"passed"`       // lookups passed through to the file system
	PassedPaths []string `json:"passed_paths"` // distinct passed-through paths (first 512)
	// Outside are the shared objects ld.so had loaded from outside the
	// image when the process ended (the audit module could not decide their
	// search, or they were dlopen'ed by a path the image does not hold).
	Outside []string `json:"outside"`
	Dropped int      `json:"dropped"` // paths beyond the bounds (docs/loader.md, "Reports")
	// Fallbacks are the lookups passed through for a reason other than the
	// image lacking the path (they are also in Passed).
	Fallbacks []Fallback `json:"fallbacks"`
}

// Fallback is a reason the shim passed lookups through (docs/loader.md,
// "Reports and debugging"), the directory it concerns, and how many.
type Fallback struct {
	Reason  string `json:"reason"`
	Dir     string `json:"dir"`
	Lookups int64  `json:"lookups"`
}

// RunCount totals one run's processes.
type RunCount struct {
	Run       string `json:"run"` // "" for lines without a run (older shims)
	Processes int    `json:"processes"`
	Answered  int64  `json:"answered"`
	Missing   int64  `json:"missing"`
	Passed    int64  `json:"passed"`
}

// FoldAdvice names what build --from takes: the image the runs used and
// the report files.
type FoldAdvice struct {
	Image string
	Files []string
}

// Argv is the build --from command as words, for a script to exec (no
// shell): the image the runs used, then flags, then the report files.
func (f *FoldAdvice) Argv(flags ...string) []string {
	img, files := "app.dlimg", []string{"RUN.report"}
	if f != nil && f.Image != "" {
		img = f.Image
	}
	if f != nil && len(f.Files) > 0 {
		files = f.Files
	}
	words := append([]string{"dlbundle", "build", "-o", img, "--from", img}, flags...)
	return append(words, files...)
}

// command is the build --from command line, as the user can copy it into
// a POSIX shell: every word that is not plain path characters in single
// quotes, where nothing but the quote itself is special. The words come
// from records and notes another user may have written (a squatted records
// dir), so a word holding control bytes (which no quoting shows safely on a
// terminal) gets no command: "" and the word, escaped, in refused.
func (f *FoldAdvice) command(flags ...string) (cmd, refused string) {
	words := f.Argv(flags...)
	for _, w := range words {
		if untrusted.Quote(w) != w {
			return "", untrusted.Quote(w)
		}
	}
	return strings.Join(shellWords(words), " "), ""
}

// line is the command as the text prints it: the command, or why none is
// given.
func (f *FoldAdvice) line(flags ...string) string {
	cmd, refused := f.command(flags...)
	if cmd == "" {
		return fmt.Sprintf("(no command given: %s holds control bytes, which no shell quoting shows safely; rename it, or give --image and report files whose names are plain)", refused)
	}
	return cmd
}

// FoldCommand is the build --from command the text advises when the runs
// lacked something the image could hold (lacked paths, libraries from
// outside, paths a rule left out), or "" when there is nothing to fold or
// a word holds control bytes: shell text, single-quoted, safe to eval.
func (s Summary) FoldCommand() string {
	if s.FoldArgv() == nil {
		return ""
	}
	cmd, _ := s.Fold.command()
	return cmd
}

// FoldArgv is FoldCommand as an argv array (nil when there is nothing to
// fold): what a script should run, with no shell between.
func (s Summary) FoldArgv() []string {
	if len(s.Lacked) == 0 && len(s.Outside) == 0 && len(s.LeftOut) == 0 {
		return nil
	}
	return s.Fold.Argv()
}

// shellWord quotes s for a POSIX shell when it holds anything but the
// characters of ordinary paths: in single quotes, each quote in s closed,
// escaped and reopened (as env's shellQuote). The caller has refused
// control bytes.
func shellWord(s string) string {
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("/._-+,:=@%", c)) {
			return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	if s == "" {
		return "''"
	}
	return s
}

func shellWords(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = shellWord(s)
	}
	return out
}

// FallbackCount totals a reason and directory over the processes.
type FallbackCount struct {
	Fallback
	Processes int `json:"processes"`
}

// ReadReports parses a report file. Lines that are not reports (a process
// killed mid-line cannot happen with O_APPEND single writes, but the file may
// be anything) are counted in bad and skipped.
func ReadReports(r io.Reader) (reports []ProcessReport, bad int, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var p ProcessReport
		if json.Unmarshal([]byte(line), &p) != nil || p.PID <= 0 {
			bad++
			continue
		}
		reports = append(reports, p)
	}
	return reports, bad, sc.Err()
}

// PathCount is a passed-through path and how many processes took it.
type PathCount struct {
	Path      string `json:"path"`
	Processes int    `json:"processes"`
}

// Summary totals the reports of a run.
type Summary struct {
	Processes int   `json:"processes"`
	Answered  int64 `json:"answered"`
	Missing   int64 `json:"missing"`
	Passed    int64 `json:"passed"`
	Dropped   int   `json:"dropped"`
	// Lacked are passed-through paths that the image could hold: the app
	// took a path the pilot run did not see. Most-taken first.
	Lacked []PathCount `json:"lacked"`
	// NodeLocal are passed-through paths that build leaves on the node by
	// policy (/etc, locale data and iconv configuration): expected, nothing
	// to re-trace. Most-taken first.
	NodeLocal []PathCount `json:"node_local"`
	// Temporary are passed-through paths in temporary or runtime
	// directories (/tmp, /var/tmp, /run), which build leaves out by default:
	// re-tracing cannot bundle them, --include can. Most-taken first.
	Temporary []PathCount `json:"temporary"`
	// IncludePrefixes are the --include prefixes that would bundle the
	// Temporary paths (squash.IncludePrefix), most-taken first.
	IncludePrefixes []string `json:"include_prefixes"`
	// PerRun are the temporary names a run makes for itself (a JVM's
	// /tmp/hsperfdata_<user>, Open MPI's session directory /tmp/ompi.<host>.<uid>,
	// names with a pid in them), grouped by pattern ("/tmp/ompi.*"): they
	// differ in every run, so no image can hold them and nothing is advised.
	PerRun []PathCount `json:"per_run"`
	// LeftOut are passed-through paths that the image holds as external
	// entries: the pilot saw them, and a rule left them on the file system
	// (only stat'd and larger than build's --stat-only-max). Set by
	// SplitLeftOut; most-taken first.
	LeftOut []PathCount `json:"left_out"`
	// Runs are the launches the reports come from (DLBUNDLE_RUN), kept apart,
	// in the order their first line appears.
	Runs []RunCount `json:"runs"`
	// Fold is the command that folds what the image lacked into it (build
	// --from); set by the caller that knows the image and the files.
	Fold   *FoldAdvice `json:"-"`
	Pseudo int         `json:"pseudo"` // distinct passed-through paths in /proc, /sys, /dev
	// Outside are the libraries ld.so loaded from outside the image (and
	// so from the shared file system, in every process). Most-taken first.
	Outside []PathCount `json:"outside"`
	// Fallbacks are the lookups passed through for a reason other than the
	// image lacking the path, by reason and directory, most lookups first.
	Fallbacks []FallbackCount `json:"fallbacks"`
}

// Summarize totals reports, classifying passed-through paths by build's
// default rules (SummarizeWithRules: an image built with --include/--exclude).
func Summarize(reports []ProcessReport) Summary {
	return SummarizeWithRules(reports, defaultRules())
}

// The default rules are built on first use, not at package init: every
// rank's exec would pay for them (~200 allocations) and only `dlbundle
// report` uses them.
var defaultRules = sync.OnceValue(func() *squash.Rules {
	rules, err := squash.NewRules(nil, nil)
	if err != nil {
		panic(err) // the default rules are constant
	}
	return rules
})

func isPseudoPath(p string) bool {
	for _, pre := range []string{"/proc", "/sys", "/dev"} {
		if p == pre || strings.HasPrefix(p, pre+"/") {
			return true
		}
	}
	return false
}

// SummarizeWithRules totals reports. Passed-through paths are told apart by
// the rules the image was built with: node-local by policy (squash's Exclude
// verdict: /etc, locale data; nothing to do), in temporary or runtime
// directories (Skip: a job's per-run files, or an app tree that --include
// PREFIX would bundle; re-tracing cannot), and lacked (the pilot did not
// take them). /proc, /sys and /dev are counted apart.
func SummarizeWithRules(reports []ProcessReport, rules *squash.Rules) Summary {
	var s Summary
	count := map[string]int{}
	pseudo := map[string]bool{}
	outside := map[string]int{}
	fallbacks := map[Fallback]*FallbackCount{} // keyed by reason and dir (Lookups 0)
	perRun := map[string]int{}
	runs := map[string]*RunCount{}
	var runOrder []string
	for _, r := range reports {
		rc := runs[r.Run]
		if rc == nil {
			rc = &RunCount{Run: r.Run}
			runs[r.Run] = rc
			runOrder = append(runOrder, r.Run)
		}
		rc.Processes++
		rc.Answered += r.Answered
		rc.Missing += r.Missing
		rc.Passed += r.Passed
		patterns := map[string]bool{}
		for _, f := range r.Fallbacks {
			k := Fallback{Reason: f.Reason, Dir: f.Dir}
			c := fallbacks[k]
			if c == nil {
				c = &FallbackCount{Fallback: k}
				fallbacks[k] = c
			}
			c.Lookups += f.Lookups
			c.Processes++
		}
		s.Processes++
		s.Answered += r.Answered
		s.Missing += r.Missing
		s.Passed += r.Passed
		s.Dropped += r.Dropped
		seen := map[string]bool{}
		for _, p := range r.Outside {
			if !seen[p] {
				seen[p] = true
				outside[p]++
			}
		}
		seen = map[string]bool{}
		for _, p := range r.PassedPaths {
			if seen[p] {
				continue
			}
			seen[p] = true
			if isPseudoPath(p) {
				pseudo[p] = true
				continue
			}
			if v, _ := rules.Match(p); v == squash.Skip {
				if pat := squash.PerRunName(p); pat != "" {
					patterns[pat] = true
					continue
				}
			}
			count[p]++
		}
		for pat := range patterns {
			perRun[pat]++
		}
	}
	for _, r := range runOrder {
		s.Runs = append(s.Runs, *runs[r])
	}
	for p, n := range perRun {
		s.PerRun = append(s.PerRun, PathCount{p, n})
	}
	prefixes := map[string]int{}
	for p, n := range count {
		switch v, _ := rules.Match(p); v {
		case squash.Exclude:
			s.NodeLocal = append(s.NodeLocal, PathCount{p, n})
		case squash.Skip:
			s.Temporary = append(s.Temporary, PathCount{p, n})
			prefixes[squash.IncludePrefix(p)] += n
		default:
			s.Lacked = append(s.Lacked, PathCount{p, n})
		}
	}
	for p, n := range outside {
		s.Outside = append(s.Outside, PathCount{p, n})
	}
	for _, c := range fallbacks {
		s.Fallbacks = append(s.Fallbacks, *c)
	}
	sort.Slice(s.Fallbacks, func(i, j int) bool {
		a, b := s.Fallbacks[i], s.Fallbacks[j]
		if a.Lookups != b.Lookups {
			return a.Lookups > b.Lookups
		}
		if a.Reason != b.Reason {
			return a.Reason < b.Reason
		}
		return a.Dir < b.Dir
	})
	var inc []PathCount
	for p, n := range prefixes {
		inc = append(inc, PathCount{p, n})
	}
	for _, l := range [][]PathCount{s.Lacked, s.NodeLocal, s.Temporary, s.Outside, inc, s.PerRun} {
		sortByProcesses(l)
	}
	for _, p := range inc {
		s.IncludePrefixes = append(s.IncludePrefixes, p.Path)
	}
	s.Pseudo = len(pseudo)
	return s
}

// SplitLeftOut moves from Lacked to LeftOut the paths the image holds as
// external entries (external reports whether it does), so that "a rule
// left it out" is told from "the pilot never saw it".
func (s *Summary) SplitLeftOut(external func(string) bool) {
	var lacked []PathCount
	for _, p := range s.Lacked {
		if external(p.Path) {
			s.LeftOut = append(s.LeftOut, p)
		} else {
			lacked = append(lacked, p)
		}
	}
	s.Lacked = lacked
}

// sortByProcesses puts the most-taken paths first, then by name.
func sortByProcesses(l []PathCount) {
	sort.Slice(l, func(i, j int) bool {
		if l[i].Processes != l[j].Processes {
			return l[i].Processes > l[j].Processes
		}
		return l[i].Path < l[j].Path
	})
}

// WriteText prints the summary for people; limit caps the listed paths (0: all).
func (s Summary) WriteText(w io.Writer, limit int) error {
	bw := bufio.NewWriter(w)
	total := s.Answered + s.Missing + s.Passed
	pct := func(n int64) float64 {
		if total == 0 {
			return 0
		}
		return 100 * float64(n) / float64(total)
	}
	s.writeFallbacks(bw, limit)
	s.writeRuns(bw, limit)
	fmt.Fprintf(bw, "%d processes, %d lookups:\n", s.Processes, total)
	fmt.Fprintf(bw, "  answered from the stage   %10d  (%5.1f%%)\n", s.Answered, pct(s.Answered))
	fmt.Fprintf(bw, "  answered as missing       %10d  (%5.1f%%)\n", s.Missing, pct(s.Missing))
	fmt.Fprintf(bw, "  passed to the file system %10d  (%5.1f%%)\n", s.Passed, pct(s.Passed))
	if s.Pseudo > 0 {
		fmt.Fprintf(bw, "%d distinct paths in /proc, /sys, /dev passed through (expected).\n", s.Pseudo)
	}
	if len(s.NodeLocal) > 0 {
		fmt.Fprintf(bw, "\n%d node-local paths passed through by policy (configuration, locale data;\n"+
			"build leaves them on the node, nothing to re-trace):\n", len(s.NodeLocal))
		writeCapped(bw, s.NodeLocal, limit)
	}
	if len(s.PerRun) > 0 {
		fmt.Fprintf(bw, "\n%d kinds of per-run temporary names (a JVM's, Open MPI's session files, names with a\n"+
			"pid in them): each run makes its own, so no image can hold them; nothing to do:\n", len(s.PerRun))
		writeCapped(bw, s.PerRun, limit)
	}
	if len(s.Temporary) > 0 {
		fmt.Fprintf(bw, "\n%d paths in temporary or runtime directories (/tmp, /var/tmp, /run), which build\n"+
			"leaves out by default (re-tracing does not change that):\n", len(s.Temporary))
		writeCapped(bw, s.Temporary, limit)
		fmt.Fprintln(bw, "A job's per-run files (its working directory, scratch) belong there: nothing to do. If they")
		fmt.Fprintln(bw, "are the app's own files (an app installed under /tmp), fold them in with --include:")
		inc := s.IncludePrefixes
		if len(inc) > 3 {
			inc = inc[:3]
		}
		var flags []string
		for _, p := range inc {
			flags = append(flags, "--include", p)
		}
		fmt.Fprintf(bw, "  %s\n", s.Fold.line(flags...))
		if more := len(s.IncludePrefixes) - len(inc); more > 0 {
			fmt.Fprintf(bw, "  (%d more prefixes in --json's include_prefixes)\n", more)
		}
	}
	if len(s.Outside) > 0 {
		fmt.Fprintf(bw, "\n%d libraries ld.so loaded from outside the image (from the shared file system,\n"+
			"in every process that loaded them):\n", len(s.Outside))
		writeCapped(bw, s.Outside, limit)
		if len(s.Lacked) == 0 {
			fmt.Fprintln(bw, "Fold them into the image (no new pilot needed; the next run loads them from the stage):")
			fmt.Fprintln(bw, "  "+s.Fold.line())
		}
	}
	if len(s.LeftOut) > 0 {
		fmt.Fprintf(bw, "\n%d paths the pilot saw and a rule left on the file system (external entries: only\n"+
			"stat'd and larger than build's --stat-only-max, 2 MiB by default):\n", len(s.LeftOut))
		writeCapped(bw, s.LeftOut, limit)
		fmt.Fprintln(bw, "Folding the reports in bundles them (a run named them); or rebuild with --stat-only-max BYTES.")
		if len(s.Lacked) == 0 {
			fmt.Fprintln(bw, "  "+s.Fold.line())
		}
	}
	if len(s.Lacked) == 0 {
		fmt.Fprintln(bw, "The image held every other path the app looked up.")
		return bw.Flush()
	}
	fmt.Fprintf(bw, "\n%d paths the image lacks (the app took them, the pilot run did not):\n", len(s.Lacked))
	writeCapped(bw, s.Lacked, limit)
	if s.Dropped > 0 {
		fmt.Fprintf(bw, "(%d more distinct paths were not recorded: each process keeps its first 512)\n", s.Dropped)
	}
	fmt.Fprintln(bw, "\nThese lookups went to the shared file system from every process. Fold them (and the")
	fmt.Fprintln(bw, "libraries above) into the image, with no new pilot: the same rules as any build, files")
	fmt.Fprintln(bw, "written by the run after the image are left out (the summary says so):")
	fmt.Fprintln(bw, "  "+s.Fold.line())
	return bw.Flush()
}

// writeRuns lists the runs when the reports hold more than one.
func (s Summary) writeRuns(w io.Writer, limit int) {
	if len(s.Runs) < 2 {
		return
	}
	fmt.Fprintf(w, "%d runs:\n  %-30s %9s %10s %10s %10s\n", len(s.Runs), "run", "processes", "answered", "missing", "passed")
	for i, r := range s.Runs {
		if limit > 0 && i == limit {
			fmt.Fprintf(w, "  ... and %d more (--all lists them)\n", len(s.Runs)-limit)
			break
		}
		name := r.Run
		if name == "" {
			name = "(no run id)"
		}
		fmt.Fprintf(w, "  %-30s %9d %10d %10d %10d\n", untrusted.Quote(name), r.Processes, r.Answered, r.Missing, r.Passed)
	}
	fmt.Fprintln(w)
}

// fallbackWhy says in words why lookups went to the file system.
func fallbackWhy(f Fallback) string {
	f.Dir, f.Reason = untrusted.Quote(f.Dir), untrusted.Quote(f.Reason)
	switch f.Reason {
	case "written":
		return "a process changed " + f.Dir + " (written): the shim leaves what is at or below it to the file system"
	case "written-everything":
		return "a process wrote where the shim could not mark one name, or into more than 64 places (written-everything): it passed every lookup through"
	case "no-table":
		return "the shim could not open its table in " + f.Dir + " (no-table; a process of another user?): it was inactive"
	case "bad-table":
		return "the table in " + f.Dir + " is damaged or of another version (bad-table): the shim was inactive"
	case "stage-too-long":
		return "DLBUNDLE_STAGE was longer than 1000 bytes (stage-too-long): the shim was inactive; use a shorter --stage-dir"
	case "dirfd":
		return "they were relative to a directory fd the shim does not serve (dirfd): the kernel resolved them"
	case "groups":
		return "a process is in more than 1,024 groups (groups): the kernel decided its permissions"
	case "other-uid":
		return "a process changed its user and could not read the stage in " + f.Dir + " (other-uid): it read the original files"
	case "too-long":
		return "their paths were longer than the shim's 4 KiB buffers (too-long)"
	case "dir-open":
		return "they opened the bundled directory " + f.Dir + " as a descriptor, or listed it with every stream slot taken (dir-open): " +
			"the shim serves listings through opendir, not directory descriptors (fstatfs, fchdir, getdents on one answer for the " +
			"file system it is on, which the image does not record); the image holds the directory, so a fold changes nothing"
	}
	return "of " + f.Reason + " " + f.Dir
}

// writeFallbacks puts first what made the shim stop answering.
func (s Summary) writeFallbacks(w io.Writer, limit int) {
	for i, f := range s.Fallbacks {
		if limit > 0 && i == limit {
			fmt.Fprintf(w, "... and %d more reasons (--all lists them)\n", len(s.Fallbacks)-limit)
			break
		}
		lookups, procs := "lookups", "processes"
		if f.Lookups == 1 {
			lookups = "lookup"
		}
		if f.Processes == 1 {
			procs = "process"
		}
		fmt.Fprintf(w, "%s %s in %d %s went to the file system because %s.\n", units.Count(f.Lookups), lookups, f.Processes, procs, fallbackWhy(f.Fallback))
	}
	if len(s.Fallbacks) > 0 {
		fmt.Fprintln(w)
	}
}

// writeCapped lists paths with their process counts under a header naming
// the columns, at most limit of them (0: all), and says how many more --all
// would show.
func writeCapped(w io.Writer, paths []PathCount, limit int) {
	fmt.Fprintf(w, "  %9s  %s\n", "processes", "path")
	for i, p := range paths {
		if limit > 0 && i == limit {
			fmt.Fprintf(w, "  ... and %d more (--all lists them)\n", len(paths)-limit)
			return
		}
		fmt.Fprintf(w, "  %9d  %s\n", p.Processes, untrusted.Quote(p.Path))
	}
}

// Lacks lists what the processes passed to the file system that an image
// could hold, for build --from (squash.FromLacks): their passed-through
// paths, less /proc, /sys and /dev, and the libraries ld.so loaded from
// outside the image, each once, in the order the reports name them.
func Lacks(reports []ProcessReport) []squash.Lack {
	var out []squash.Lack
	seen := map[string]int{}
	add := func(p string, lib bool) {
		if isPseudoPath(p) {
			return
		}
		if i, ok := seen[p]; ok {
			out[i].Library = out[i].Library || lib
			return
		}
		seen[p] = len(out)
		out = append(out, squash.Lack{Path: p, Library: lib})
	}
	for _, r := range reports {
		for _, p := range r.Outside {
			add(p, true)
		}
		for _, p := range r.PassedPaths {
			add(p, false)
		}
	}
	return out
}

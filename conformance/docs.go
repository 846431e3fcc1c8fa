package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// writeDocs writes the results page: what ran, on what, and every
// divergence (the first 200 per corpus; the rest counted).
func writeDocs(file string, results []*Result, version string) error {
	var b strings.Builder
	host, _ := os.Hostname()
	kernel, _ := exec.Command("uname", "-r").Output()
	cpus, _ := exec.Command("nproc").Output()
	glibc, _ := exec.Command("getconf", "GNU_LIBC_VERSION").Output()
	fmt.Fprintf(&b, "# Conformance: the same tests natively and under `dlbundle exec`\n\n")
	fmt.Fprintf(&b, "Written by `make conformance` (conformance/, `go run ./conformance`); edit the harness, not this page.\n")
	fmt.Fprintf(&b, "Each corpus: a pilot run of its own start-up is traced, an image built, then the whole corpus runs\n")
	fmt.Fprintf(&b, "natively, under `dlbundle exec` with a fresh stage dir (cold: that exec stages), and again (warm), both\n")
	fmt.Fprintf(&b, "with `--report`. A divergence is a test whose outcome under exec differs from native (or a C probe line\n")
	fmt.Fprintf(&b, "that differs). A fallback is a path the image decides that the shim's report lists as passed to the file\n")
	fmt.Fprintf(&b, "system (the shim did not answer it: a dirty directory, the shim off); a run with fallbacks is not\n")
	fmt.Fprintf(&b, "counted as agreement, whatever its outcomes.\n\n")
	fmt.Fprintf(&b, "- date: %s\n- machine: %s, %s CPUs, kernel %s, %s, %s\n- dlbundle: %s\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), host, strings.TrimSpace(string(cpus)), strings.TrimSpace(string(kernel)),
		strings.TrimSpace(string(glibc)), "GOARCH "+goarch(), version)
	fmt.Fprintf(&b, "| corpus | tests (native) | divergences | cold / warm | shim answered | fallbacks | time | load (start -> end) |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		if r.Err != nil {
			fmt.Fprintf(&b, "| %s | ERROR | | | | | %v | %s -> %s |\n", r.Corpus.Name, r.Elapsed.Round(time.Second), r.LoadStart, r.LoadEnd)
			continue
		}
		c, w := 0, 0
		for _, d := range r.Divergences {
			if d.ColdDiffs {
				c++
			}
			if d.WarmDiff {
				w++
			}
		}
		sub := ""
		if r.Subset {
			sub = " (subset)"
		}
		fmt.Fprintf(&b, "| %s%s | %s | %d | %d / %d | %d | %d | %v | %s -> %s |\n", r.Corpus.Name, sub, counts(r.Counts[Native]),
			len(r.Divergences), c, w, r.Stats[Cold].Answered+r.Stats[Warm].Answered, r.Fallbacks(),
			r.Elapsed.Round(time.Second), r.LoadStart, r.LoadEnd)
	}
	for _, r := range results {
		fmt.Fprintf(&b, "\n## %s\n\n%s\n\n", r.Corpus.Name, r.Corpus.What)
		if r.Err != nil {
			fmt.Fprintf(&b, "**Error:** %s\n", "```\n"+r.Err.Error()+"\n```")
			continue
		}
		fmt.Fprintf(&b, "Image: %d entries. Wall time native %v, cold %v, warm %v.\n\n", r.Entries,
			r.Times[Native].Round(time.Second), r.Times[Cold].Round(time.Second), r.Times[Warm].Round(time.Second))
		fmt.Fprintf(&b, "| run | outcomes | processes reporting | answered | missing | passed | fallbacks (processes) |\n|---|---|---|---|---|---|---|\n")
		fmt.Fprintf(&b, "| native | %s | | | | | |\n", counts(r.Counts[Native]))
		for _, m := range []Mode{Cold, Warm} {
			s := r.Stats[m]
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %d (%d) |\n", m, counts(r.Counts[m]), s.Processes, s.Answered, s.Missing, s.Passed, s.Fallbacks, s.FallbackProcs)
		}
		for _, m := range []Mode{Cold, Warm} {
			if s := r.Stats[m]; len(s.Examples) > 0 {
				fmt.Fprintf(&b, "\nFallbacks (%s), e.g.: `%s`\n", m, strings.Join(s.Examples, "`, `"))
			}
			if s := r.Stats[m]; len(s.Reasons) > 0 {
				fmt.Fprintf(&b, "\nThe shim's own fallback counts (%s): %v\n", m, s.Reasons)
			}
		}
		if len(r.Unstable) > 0 {
			fmt.Fprintf(&b, "\n%d tests differ between two native runs and are not compared: `%s`\n", len(r.Unstable), strings.Join(r.Unstable, "`, `"))
		}
		if len(r.Divergences) == 0 {
			fmt.Fprintf(&b, "\nNo divergence.\n")
			continue
		}
		fmt.Fprintf(&b, "\n%d divergences (native / cold / warm; empty: the run has no such test):\n\n", len(r.Divergences))
		for i, d := range r.Divergences {
			if i == 200 {
				fmt.Fprintf(&b, "- ... and %d more\n", len(r.Divergences)-200)
				break
			}
			if d.Native != "" && len(d.Native) > 12 || len(d.Cold) > 12 {
				// Probe lines: the outcomes are the lines themselves.
				fmt.Fprintf(&b, "- `%s`\n  - native: `%s`\n  - cold:   `%s`\n  - warm:   `%s`\n", d.Test, d.Native, d.Cold, d.Warm)
			} else {
				note := ""
				if d.ColdDiffs != d.WarmDiff {
					note = " (one exec run only: the other agrees with native; suspect timing)"
				}
				fmt.Fprintf(&b, "- `%s`: %s / %s / %s%s\n", d.Test, or(d.Native), or(d.Cold), or(d.Warm), note)
			}
		}
	}
	b.WriteString(explanationsMarker)
	if old, err := os.ReadFile(file); err == nil {
		if i := strings.Index(string(old), explanationsMarker); i >= 0 {
			b.WriteString(string(old)[i+len(explanationsMarker):])
		}
	} else {
		b.WriteString("\n")
	}
	return os.WriteFile(file, []byte(b.String()), 0o644)
}

// explanationsMarker separates the generated results from the
// hand-written explanation of each divergence, which a rerun keeps.
const explanationsMarker = "\n<!-- conformance: everything below is written by hand and kept by make conformance -->\n"

func counts(c map[string]int) string {
	var s []string
	for _, k := range sortedKeys(c) {
		s = append(s, fmt.Sprintf("%d %s", c[k], k))
	}
	return strings.Join(s, ", ")
}

func or(s string) string {
	if s == "" {
		return "(absent)"
	}
	return s
}

// Command testsum is `make test`'s reporter: it keeps go test's usual
// output short (package lines, and the output of failing tests only), says
// of each fuzz run whether it fuzzed beyond the seed corpus, and ends with
// one line of totals that a person or CI can read at a glance:
//
//	go test -json ./... ; echo "testsum-exit $?"   | testsum go STATE
//	make $(TEST_AFTER) ; echo "testsum-exit $?"    | testsum fuzz STATE
//	testsum total STATE        # "N passed, N failed, N skipped"; exit 1 on failures
//
// STATE is a small JSON file carrying the counts between the steps. The
// "testsum-exit N" line is the producer's exit status (lost in a pipe
// otherwise): a non-zero status with no failing test counted (a package that
// did not build, a crashed go command) counts as one failure.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// counts is the STATE file.
type counts struct {
	Passed, Failed, Skipped int
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: testsum go|fuzz|total STATE")
		os.Exit(2)
	}
	mode, state := os.Args[1], os.Args[2]
	var c counts
	if b, err := os.ReadFile(state); err == nil {
		if err := json.Unmarshal(b, &c); err != nil {
			fmt.Fprintf(os.Stderr, "testsum: %s: %v\n", state, err)
			os.Exit(2)
		}
	}
	switch mode {
	case "go":
		goTest(os.Stdin, os.Stdout, &c)
	case "fuzz":
		fuzz(os.Stdin, os.Stdout, &c)
	case "total":
		fmt.Println(c.line())
		if c.Failed > 0 {
			os.Exit(1)
		}
		return
	default:
		fmt.Fprintf(os.Stderr, "testsum: unknown mode %q; usage: testsum go|fuzz|total STATE\n", mode)
		os.Exit(2)
	}
	b, _ := json.Marshal(c)
	if err := os.WriteFile(state, b, 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "testsum: %v\n", err)
		os.Exit(2)
	}
}

func (c counts) line() string {
	return fmt.Sprintf("%d passed, %d failed, %d skipped", c.Passed, c.Failed, c.Skipped)
}

// exitLine is the status line the Makefile appends to a producer's output.
var exitLine = regexp.MustCompile(`^testsum-exit (\d+)$`)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build-output, build-fail
}

// goTest reads go test -json: every test and subtest that passes, fails or
// skips is counted; the output of failing tests and the package summary
// lines are printed, the rest (=== RUN, passing tests' logs) is not.
func goTest(r io.Reader, w io.Writer, c *counts) {
	out := map[string][]string{} // package + test -> its output so far
	failedIn := map[string]bool{}
	failed0 := c.Failed
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := exitLine.FindStringSubmatch(line); m != nil {
			if m[1] != "0" && c.Failed == failed0 {
				fmt.Fprintf(w, "go test exited with status %s without a failing test\n", m[1])
				c.Failed++
			}
			continue
		}
		var e event
		if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &e) != nil {
			fmt.Fprintln(w, line) // go's own messages (bad pattern, ...)
			continue
		}
		key := e.Package + "\x00" + e.Test
		switch e.Action {
		case "build-output":
			fmt.Fprint(w, e.Output)
		case "output":
			if e.Test == "" {
				if o := e.Output; !strings.HasPrefix(o, "=== ") && o != "PASS\n" && o != "FAIL\n" && !strings.HasPrefix(o, "testing: warning: no tests") {
					fmt.Fprint(w, o)
				}
				continue
			}
			if !strings.HasPrefix(e.Output, "=== ") { // RUN, PAUSE, CONT, NAME
				out[key] = append(out[key], e.Output)
			}
		case "pass":
			if e.Test != "" {
				c.Passed++
			}
			delete(out, key)
		case "skip":
			if e.Test != "" {
				c.Skipped++
			}
			delete(out, key)
		case "fail":
			if e.Test != "" {
				c.Failed++
				failedIn[e.Package] = true
				fmt.Fprint(w, strings.Join(out[key], ""))
			} else if !failedIn[e.Package] {
				c.Failed++ // the package failed outside any test: build, init, timeout
			}
			delete(out, key)
		}
	}
}

// A make recipe line that runs one fuzz target, and go's progress lines.
var (
	fuzzCmd  = regexp.MustCompile(`go test .*-fuzz '?\^?(\w+)\$?'?.*\s(\S+)$`)
	fuzzStat = regexp.MustCompile(`^fuzz: elapsed: (\w+), execs: (\d+) .*new interesting: (\d+) \(total: (\d+)\)`)
)

// fuzz passes the TEST_AFTER output through and, after each fuzz run, says
// whether it fuzzed: go's last progress line has the executions and the
// inputs it found beyond the seed corpus. A run that stops while still
// running the corpus (no "execs:" line) did not fuzz, says so, and counts
// as skipped. Each fuzz run counts as one test.
func fuzz(r io.Reader, w io.Writer, c *counts) {
	target, pkg, stat := "", "", []string(nil)
	failed0 := c.Failed
	done := func(ok bool) {
		if target == "" {
			return
		}
		switch {
		case !ok:
			c.Failed++
			fmt.Fprintf(w, "fuzz %s %s: FAILED (the failing input is saved under %stestdata/fuzz/%s)\n", target, pkg, pkg, target)
		case stat == nil || stat[2] == "0":
			c.Skipped++ // its seeds passed, but no fuzzing happened: not a pass
			fmt.Fprintf(w, "fuzz %s %s: did NOT fuzz: it only ran the seed corpus (raise -fuzztime, or a quieter machine)\n", target, pkg)
		default:
			c.Passed++
			execs, _ := strconv.Atoi(stat[2])
			fmt.Fprintf(w, "fuzz %s %s: fuzzed %s, %d execs, %s new interesting inputs (corpus %s)\n", target, pkg, stat[1], execs, stat[3], stat[4])
		}
		target, stat = "", nil
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := exitLine.FindStringSubmatch(line); m != nil {
			done(false) // a run cut short (make stopped) did not pass
			if m[1] != "0" && c.Failed == failed0 {
				fmt.Fprintf(w, "fuzz runs exited with status %s without a failing target\n", m[1])
				c.Failed++
			}
			continue
		}
		if m := fuzzCmd.FindStringSubmatch(line); m != nil {
			done(false)
			target, pkg = m[1], m[2]
		}
		if m := fuzzStat.FindStringSubmatch(line); m != nil {
			stat = m
			continue // progress lines: only the last one matters, printed by done
		}
		if strings.HasPrefix(line, "fuzz: elapsed:") || line == "PASS" {
			continue
		}
		fmt.Fprintln(w, line)
		switch {
		case strings.HasPrefix(line, "ok "):
			done(true)
		case strings.HasPrefix(line, "FAIL\t") || strings.HasPrefix(line, "FAIL "):
			done(false)
		}
	}
}

package main

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
)

// Outcomes maps a test's name to what happened to it ("pass", "fail",
// "error", "skip", or for a probe line its whole text).
type Outcomes map[string]string

// junitSuites is what regrtest's --junit-xml and pytest's --junitxml write:
// <testsuites><testsuite><testcase classname name><failure|error|skipped/>.
// regrtest nests testsuite elements one level deeper than pytest does.
type junitSuites struct {
	Suites []junitSuite `xml:"testsuite"`
	Cases  []junitCase  `xml:"testcase"`
}

type junitSuite struct {
	Suites []junitSuite `xml:"testsuite"`
	Cases  []junitCase  `xml:"testcase"`
}

type junitCase struct {
	Class   string    `xml:"classname,attr"`
	Name    string    `xml:"name,attr"`
	Failure *struct{} `xml:"failure"`
	Error   *struct{} `xml:"error"`
	Skipped *struct{} `xml:"skipped"`
}

// ParseJUnit reads JUnit XML (a <testsuites> or a single <testsuite>
// root). A test name seen twice (parametrised ids that collide) gets a
// "#2" suffix, so that no outcome is lost.
func ParseJUnit(r io.Reader) (Outcomes, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	var root junitSuites
	if err := xml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("JUnit XML: %w", err)
	}
	out := Outcomes{}
	var add func(cases []junitCase, suites []junitSuite)
	add = func(cases []junitCase, suites []junitSuite) {
		for _, c := range cases {
			o := "pass"
			switch {
			case c.Error != nil:
				o = "error"
			case c.Failure != nil:
				o = "fail"
			case c.Skipped != nil:
				o = "skip"
			}
			name := c.Name
			if c.Class != "" {
				name = c.Class + "." + c.Name
			}
			key := name
			for n := 2; out[key] != ""; n++ {
				key = fmt.Sprintf("%s#%d", name, n)
			}
			out[key] = o
		}
		for _, s := range suites {
			add(s.Cases, s.Suites)
		}
	}
	add(root.Cases, root.Suites)
	return out, nil
}

// tcltest -verbose "pse" (and the default "b" body of a failure): one
// "++++ NAME PASSED", "++++ NAME SKIPPED: CONSTRAINTS" or "==== NAME
// FAILED" line per test, after the file's "FILE.test" header from all.tcl.
var (
	tclPassed  = regexp.MustCompile(`^\+\+\+\+ (\S+) PASSED`)
	tclSkipped = regexp.MustCompile(`^\+\+\+\+ (\S+) SKIPPED`)
	tclFailed  = regexp.MustCompile(`^==== (\S+) FAILED`)
)

// ParseTcltest reads the output of Tcl's tests/all.tcl run with -verbose
// pse. A test that failed and was then reported passed (never) or any name
// seen twice keeps the worst outcome.
func ParseTcltest(r io.Reader) (Outcomes, error) {
	out := Outcomes{}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if m := tclFailed.FindStringSubmatch(l); m != nil {
			out[m[1]] = "fail"
		} else if m := tclSkipped.FindStringSubmatch(l); m != nil && out[m[1]] == "" {
			out[m[1]] = "skip"
		} else if m := tclPassed.FindStringSubmatch(l); m != nil && out[m[1]] == "" {
			out[m[1]] = "pass"
		}
	}
	return out, sc.Err()
}

// ParseLines makes each output line a test: the key is the line's
// description (the text before " = ", numbered when it repeats), the
// outcome the whole line. A line missing from one run is a divergence too.
func ParseLines(r io.Reader) (Outcomes, error) {
	out := Outcomes{}
	seen := map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l := sc.Text()
		desc, _, _ := strings.Cut(l, " = ")
		seen[desc]++
		key := fmt.Sprintf("%s [%d]", desc, seen[desc])
		out[key] = l
	}
	return out, sc.Err()
}

// Divergence is one test whose outcome differs between runs.
type Divergence struct {
	Test                string
	Native, Cold, Warm  string // "" when the run has no such test
	ColdDiffs, WarmDiff bool
}

// Compare lists the tests whose outcome under exec (cold or warm) is not
// the native one, sorted by name.
func Compare(native, cold, warm Outcomes) []Divergence {
	names := map[string]bool{}
	for _, o := range []Outcomes{native, cold, warm} {
		for k := range o {
			names[k] = true
		}
	}
	var ds []Divergence
	for k := range names {
		n, c, w := native[k], cold[k], warm[k]
		if c != n || w != n {
			ds = append(ds, Divergence{Test: k, Native: n, Cold: c, Warm: w, ColdDiffs: c != n, WarmDiff: w != n})
		}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i].Test < ds[j].Test })
	return ds
}

// Count returns how many tests had each outcome (probe lines: "line").
func (o Outcomes) Count() map[string]int {
	c := map[string]int{}
	for _, v := range o {
		switch v {
		case "pass", "fail", "error", "skip":
			c[v]++
		default:
			c["line"]++
		}
	}
	return c
}

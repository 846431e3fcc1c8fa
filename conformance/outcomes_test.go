package main

import (
	"strings"
	"testing"
)

// regrtest's --junit-xml nests a <testsuite> per module inside a
// <testsuites> root; pytest writes one <testsuite> below <testsuites>.
func TestParseJUnitRegrtestAndPytest(t *testing.T) {
	regrtest := `<testsuites tests="4"><testsuite name="test_os" tests="4">
<testsuite name="test.test_os.A">
<testcase name="test.test_os.A.test_ok" status="run" result="completed" />
<testcase name="test.test_os.A.test_bad" status="run" result="completed"><failure type="AssertionError">x</failure></testcase>
<testcase name="test.test_os.A.test_skip" status="run" result="completed"><skipped>no</skipped></testcase>
</testsuite>
<testcase name="test.test_os.B.test_err" status="run" result="completed"><error type="OSError">e</error></testcase>
</testsuite></testsuites>`
	got, err := ParseJUnit(strings.NewReader(regrtest))
	if err != nil {
		t.Fatal(err)
	}
	want := Outcomes{"test.test_os.A.test_ok": "pass", "test.test_os.A.test_bad": "fail", "test.test_os.A.test_skip": "skip", "test.test_os.B.test_err": "error"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	pytest := `<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="3">
<testcase classname="numpy.core.tests.test_a.TestX" name="test_one[1]" time="0.1" />
<testcase classname="numpy.core.tests.test_a.TestX" name="test_one[1]" time="0.1"><skipped type="pytest.skip" message="m">s</skipped></testcase>
<testcase classname="numpy.core.tests.test_a" name="test_two" time="0.1"><failure message="f">tb</failure></testcase>
</testsuite></testsuites>`
	got, err = ParseJUnit(strings.NewReader(pytest))
	if err != nil {
		t.Fatal(err)
	}
	if got["numpy.core.tests.test_a.TestX.test_one[1]"] != "pass" || got["numpy.core.tests.test_a.TestX.test_one[1]#2"] != "skip" ||
		got["numpy.core.tests.test_a.test_two"] != "fail" || len(got) != 3 {
		t.Errorf("pytest: %v", got)
	}
}

func TestParseTcltest(t *testing.T) {
	out := `cmdAH.test
++++ cmdAH-1.1 PASSED
++++ cmdAH-1.2 SKIPPED: unix
==== filename-1.1 Test a thing FAILED
==== Contents of test case:
==== filename-1.1 FAILED
++++ filename-1.1 PASSED
`
	got, err := ParseTcltest(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if got["cmdAH-1.1"] != "pass" || got["cmdAH-1.2"] != "skip" || got["filename-1.1"] != "fail" || len(got) != 3 {
		t.Errorf("%v", got)
	}
}

// Compare reports a test that differs in either exec run, one that is
// missing from a run, and nothing for agreement.
func TestCompare(t *testing.T) {
	native := Outcomes{"a": "pass", "b": "fail", "c": "pass", "d": "skip"}
	cold := Outcomes{"a": "pass", "b": "fail", "c": "error", "d": "skip"}
	warm := Outcomes{"a": "pass", "b": "pass", "c": "error"}
	ds := Compare(native, cold, warm)
	var got []string
	for _, d := range ds {
		got = append(got, d.Test+":"+d.Native+"/"+d.Cold+"/"+d.Warm)
	}
	if strings.Join(got, " ") != "b:fail/fail/pass c:pass/error/error d:skip/skip/" {
		t.Errorf("divergences %v", got)
	}
	if ds := Compare(native, native, native); len(ds) != 0 {
		t.Errorf("identical runs: %v", ds)
	}
}

// ParseLines keys each probe line by its description, numbering repeats,
// so that an extra or a missing line shows as one divergence, not a shift
// of every line after it.
func TestParseLinesRepeatsAndShift(t *testing.T) {
	native, _ := ParseLines(strings.NewReader("stat R/a = 0 x\nstat R/a = 0 x\nopen R/b = ok\n"))
	shim, _ := ParseLines(strings.NewReader("stat R/a = 0 x\nopen R/b = ok\n"))
	ds := Compare(native, shim, shim)
	if len(ds) != 1 || ds[0].Test != "stat R/a [2]" || ds[0].Cold != "" {
		t.Errorf("%+v", ds)
	}
}

package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// pynamicLikeTree makes an app tree directly under /tmp (not $TMPDIR: the
// rule is about /tmp), as Pynamic's build leaves it, with two files.
func pynamicLikeTree(t *testing.T) (dir string, files []string) {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "dlbundle-pynamic-build-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for _, name := range []string{"lib/libmodule0.so", "pynamic_driver.py"} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	return dir, files
}

// An app whose whole tree is under /tmp: build refuses, and the message names
// the prefix to give --include, so that the fix can be copied.
func TestBuildNothingToBundleNamesTheTmpPrefix(t *testing.T) {
	app, files := pynamicLikeTree(t)
	t.Chdir(t.TempDir())
	writeTestTrace(t, "app.trace", files...)
	err := (&BuildCmd{Output: "app.dlimg", Traces: []string{"app.trace"}}).Run()
	if err == nil {
		t.Fatal("build of a tree under /tmp succeeded without --include")
	}
	for _, want := range []string{"nothing to bundle: 2 temporary or runtime directory", "2 under " + app, "--include " + app} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%s", want, err)
		}
	}
	// The advice works: with it, the tree is bundled.
	var out bytes.Buffer
	if err := (&BuildCmd{Output: "app.dlimg", Traces: []string{"app.trace"}, Include: []string{app}, summary: &out}).Run(); err != nil {
		t.Fatalf("with --include %s: %v", app, err)
	}
	if strings.Contains(out.String(), "temporary or runtime") {
		t.Errorf("with --include the summary still leaves the tree out:\n%s", out.String())
	}
}

// When some of the app is bundled and some is under /tmp, the summary's
// "not bundled" line says where, with the --include to copy.
func TestBuildSummaryNamesTheTmpPrefix(t *testing.T) {
	app, files := pynamicLikeTree(t)
	t.Chdir(t.TempDir())
	writeTestTrace(t, "app.trace", append([]string{"/usr/bin/env"}, files...)...)
	var out bytes.Buffer
	if err := (&BuildCmd{DryRun: true, Traces: []string{"app.trace"}, summary: &out}).Run(); err != nil {
		t.Fatal(err)
	}
	want := "2 under " + app + ": to bundle them, --include " + app + "\n"
	if !strings.Contains(out.String(), want) {
		t.Errorf("summary lacks %q:\n%s", want, out.String())
	}
}

// dlbundle report: a /tmp path is left out by build's policy, unless the
// image (--image) was built with --include of its prefix: then the image
// lacks it (the pilot did not take it), and re-tracing is the advice.
func TestReportImageRulesDecideTmpPaths(t *testing.T) {
	app, files := pynamicLikeTree(t)
	t.Chdir(t.TempDir())
	writeTestTrace(t, "app.trace", files...)
	if err := (&BuildCmd{Output: "app.dlimg", Traces: []string{"app.trace"}, Include: []string{app}, summary: io.Discard}).Run(); err != nil {
		t.Fatal(err)
	}
	later := filepath.Join(app, "lib", "libmodule1.so")
	line := `{"pid":7,"exe":"/usr/bin/python3","answered":5,"missing":0,"passed":1,"passed_paths":["` + later + `"],"dropped":0}` + "\n"
	if err := os.WriteFile("run.report", []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(c *ReportCmd) string {
		t.Helper()
		var out bytes.Buffer
		c.Files, c.out = []string{"run.report"}, &out
		if err := c.Run(); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	if text := run(&ReportCmd{}); !strings.Contains(text, "--from app.dlimg --include "+app+" run.report") || strings.Contains(text, "image lacks") {
		t.Errorf("default rules: %s not left out by policy with --include advice:\n%s", later, text)
	}
	if text := run(&ReportCmd{Image: "app.dlimg"}); !strings.Contains(text, "1 paths the image lacks") || strings.Contains(text, "temporary or runtime") {
		t.Errorf("image built with --include %s: %s not listed as lacked:\n%s", app, later, text)
	}
}

package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// inspect --html writes the page of the image and its trace, under a
// temporary name renamed into place; --trace alone (without --html) is refused.
func TestInspectHTMLWritesThePage(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	writeTestTrace(t, "app.trace", "/usr/bin/env")
	if err := (&BuildCmd{Output: "app.dlimg", Traces: []string{"app.trace"}, summary: io.Discard}).Run(); err != nil {
		t.Fatal(err)
	}
	if err := (&InspectCmd{Image: "app.dlimg", HTML: "app.html", Traces: []string{"app.trace"}}).Run(); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile("app.html")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<!DOCTYPE html>", "Where start-up goes", "/usr/bin/env", "The image's bytes by prefix", "File calls over time"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".app.html.tmp-*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
	err = (&InspectCmd{Image: "app.dlimg", Traces: []string{"app.trace"}}).Run()
	if err == nil || !strings.Contains(err.Error(), "--html FILE") {
		t.Errorf("--trace without --html: %v; want an error naming --html", err)
	}
}

// trace --html writes the pilot's page next to its trace.
func TestTraceHTMLWritesThePage(t *testing.T) {
	dir := t.TempDir()
	out, page := filepath.Join(dir, "ls.trace"), filepath.Join(dir, "ls.html")
	if err := (&TraceCmd{Command: []string{"/bin/ls", "/usr/lib"}, Output: out, Quiet: true, HTML: page}).Run(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"/bin/ls /usr/lib", "File calls over time", "Lookups by directory", "No image given"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

package clitest

import (
	"strings"
	"testing"
)

func TestLineDiff(t *testing.T) {
	if d := LineDiff("a\nb\n", "a\nb\n", "x", "y", 0); d != "" {
		t.Errorf("equal outputs: %q, want \"\"", d)
	}
	d := LineDiff("a\nb\nc", "a\nB\nc\nd", "native", "shim", 0)
	want := "line 2:\n  native: b\n  shim:   B\nline 4:\n  native: \n  shim:   d\n"
	if d != want {
		t.Errorf("got\n%s\nwant\n%s", d, want)
	}
	// At most limit lines, then how many more.
	d = LineDiff("1\n2\n3\n4", "5\n6\n7\n8", "a", "b", 2)
	if strings.Count(d, "line ") != 2 || !strings.HasSuffix(d, "... and 2 more differing lines\n") {
		t.Errorf("limit 2 of 4 differing lines:\n%s", d)
	}
}

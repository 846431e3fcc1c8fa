package stagefmt

import "testing"

func TestKernelOlder(t *testing.T) {
	for _, c := range []struct {
		release, min string
		older        bool
	}{
		{"6.1.0-18-amd64", "3.2.0", false},
		{"3.2.0", "3.2.0", false},
		{"3.1.10", "3.2.0", true},
		{"4.18.0-553.el8_10.x86_64", "5.4.0", true},
		{"5.14.0", "4.4.0", false},
		{"6.18", "3.2.0", false},
		{"weird", "3.2.0", false},
		{"5.4.0", "", false},
	} {
		if got := KernelOlder(c.release, c.min); got != c.older {
			t.Errorf("KernelOlder(%q, %q) = %v, want %v", c.release, c.min, got, c.older)
		}
	}
	for _, c := range []struct {
		v       string
		atLeast bool
	}{{"2.31", false}, {"2.33", true}, {"2.41", true}, {"3.0", true}, {"x", false}} {
		if got := versionAtLeast(c.v, 2, 33); got != c.atLeast {
			t.Errorf("versionAtLeast(%q, 2, 33) = %v", c.v, got)
		}
	}
}

package loader

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The probe against this machine's real ld.so: the rules must name the
// directory itself last and at least one default directory, and agree with
// what ld.so prints for a search of a name that does not exist.
func TestProbeSearchRulesOfThisNode(t *testing.T) {
	dir := t.TempDir()
	if err := writeShim(filepath.Join(dir, stageShimDir)); err != nil {
		t.Fatal(err)
	}
	rules, err := probeSearchRules(context.Background(), filepath.Join(dir, stageShimDir))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(rules), "\n"), "\n")
	if lines[0] != "dlbundle-search 1" {
		t.Fatalf("header %q", lines[0])
	}
	var caps, dirs []string
	for _, l := range lines[1:] {
		switch {
		case strings.HasPrefix(l, "cap "):
			caps = append(caps, l[4:])
		case strings.HasPrefix(l, "dir "):
			dirs = append(dirs, l[4:])
		default:
			t.Fatalf("line %q", l)
		}
	}
	if len(caps) == 0 || caps[len(caps)-1] != "" || len(dirs) == 0 {
		t.Fatalf("rules %q", rules)
	}
	// glibc >= 2.33 on x86-64 probes glibc-hwcaps subdirectories when the CPU
	// supports x86-64-v2 (every x86-64 CPU of the last decade).
	if _, err := os.Stat("/lib64/ld-linux-x86-64.so.2"); err == nil && !strings.Contains(string(rules), "cap glibc-hwcaps/x86-64-v2/\n") {
		t.Errorf("no glibc-hwcaps/x86-64-v2 in %q", rules)
	}
}

func TestParseSearchRules(t *testing.T) {
	help := "Shared library search path:\n  (libraries located via /etc/ld.so.cache)\n" +
		"  /lib/x86_64-linux-gnu (system search path)\n  /usr/lib (system search path)\n"
	debug := "     1:\tfind library=audit.so [0]; searching\n" +
		"     1:\t search path=/s/shim/glibc-hwcaps/x86-64-v3:/s/shim/tls/x86_64:/s/shim\t\t(LD_LIBRARY_PATH)\n"
	got, err := parseSearchRules(help, debug, "/s/shim")
	if err != nil {
		t.Fatal(err)
	}
	want := "dlbundle-search 1\ncap glibc-hwcaps/x86-64-v3/\ncap tls/x86_64/\ncap \ndir /lib/x86_64-linux-gnu\ndir /usr/lib\n"
	if string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
	for name, dbg := range map[string]string{
		"no search":    "",
		"foreign dir":  "search path=/other/x:/s/shim\t\t(LD_LIBRARY_PATH)\n",
		"not last":     "search path=/s/shim:/s/shim/tls\t\t(LD_LIBRARY_PATH)\n",
		"newline name": "search path=/s/shim/a\n:/s/shim\t\t(LD_LIBRARY_PATH)\n",
	} {
		if _, err := parseSearchRules(help, dbg, "/s/shim"); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := parseSearchRules("nothing", debug, "/s/shim"); err == nil {
		t.Error("help without system directories accepted")
	}
}

func TestParseShebang(t *testing.T) {
	for in, want := range map[string][2]string{
		"#!/bin/sh\necho":                   {"/bin/sh", ""},
		"#! /usr/bin/env  python3 \n":       {"/usr/bin/env", "python3"},
		"#!/usr/bin/awk -f -v x=1\t\nBEGIN": {"/usr/bin/awk", "-f -v x=1"},
		"#!/bin/bash\t-e\n":                 {"/bin/bash", "-e"},
	} {
		interp, arg, ok := parseShebang([]byte(in))
		if !ok || interp != want[0] || arg != want[1] {
			t.Errorf("%q: got %q %q %v, want %q %q", in, interp, arg, ok, want[0], want[1])
		}
	}
	for _, in := range []string{"#!/bin/sh", "\x7fELF", "#!\n", "#!   \n", "echo\n"} {
		if _, _, ok := parseShebang([]byte(in)); ok {
			t.Errorf("%q: accepted", in)
		}
	}
}

func FuzzParseShebang(f *testing.F) {
	f.Add([]byte("#!/usr/bin/env python3\n"))
	f.Add([]byte("#!\t/bin/sh -e \t\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		interp, arg, ok := parseShebang(b)
		if !ok {
			return
		}
		if interp == "" || strings.ContainsAny(interp, " \t\n\x00") || strings.ContainsRune(arg, '\n') ||
			strings.TrimSpace(arg) != arg && strings.Trim(arg, " \t") != arg {
			t.Fatalf("%q: interp %q arg %q", b, interp, arg)
		}
	})
}

func FuzzParseSearchRules(f *testing.F) {
	f.Add("  /usr/lib (system search path)\n", "search path=/s/tls:/s\t\t(LD_LIBRARY_PATH)\n")
	f.Fuzz(func(t *testing.T, help, debug string) {
		rules, err := parseSearchRules(help, debug, "/s")
		if err != nil {
			return
		}
		// what audit.c's reader accepts: header, then "cap X/" lines ending
		// with "cap ", then "dir /..." lines, all shorter than its buffer
		lines := strings.Split(strings.TrimSuffix(string(rules), "\n"), "\n")
		if len(rules) >= 4000 || lines[0] != "dlbundle-search 1" {
			t.Fatalf("rules %q", rules)
		}
		for _, l := range lines[1:] {
			if !strings.HasPrefix(l, "cap ") && !strings.HasPrefix(l, "dir /") {
				t.Fatalf("line %q in %q", l, rules)
			}
		}
	})
}

// TestSearchOpensEachStagedLibraryOnce: on a warm stage, each library ld.so
// loads from the stage is opened once, by ld.so: the audit object's search
// takes "ELF of this node" from the table (flag set at staging,
// markNodeELF) instead of opening the staged copy to read its header first.
// The spack tree's app loads every package's library through its RUNPATH.
func TestSearchOpensEachStagedLibraryOnce(t *testing.T) {
	needTools(t, "strace", "gcc", "/usr/bin/python3")
	bin := dlbundleCLI(t)
	dir := t.TempDir()
	app, _ := spackTree(t, dir, 5)
	env := cleanEnv(dir)
	tr := filepath.Join(dir, "app.trace")
	runIn(t, dir, env, bin, "trace", "-q", "-o", tr, "--", app)
	img := filepath.Join(dir, "app.dlimg")
	runIn(t, dir, env, bin, "build", "-o", img, "--include", filepath.Join(dir, "tree"), tr)
	stage := filepath.Join(dir, "stage")
	execArgs := []string{"exec", "--stage-dir", stage, img, "--", app}
	native := runIn(t, dir, env, app)
	if out := runIn(t, dir, env, bin, execArgs...); out != native { // cold: stages
		t.Fatalf("exec: %q, natively %q", out, native)
	}
	log := filepath.Join(dir, "warm.strace")
	runIn(t, dir, env, "strace", append([]string{"-f", "-qq", "-e", "trace=open,openat", "-o", log, bin}, execArgs...)...)
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	opens := map[string]int{}
	for _, l := range strings.Split(string(b), "\n") {
		i := strings.Index(l, `"`+stage+"/sha256-")
		if i < 0 || !strings.Contains(l, "/root/") {
			continue
		}
		p := l[i+1:]
		p = p[:strings.IndexByte(p, '"')]
		if strings.HasSuffix(p, ".so") {
			opens[p[strings.Index(p, "/root/")+5:]]++
		}
	}
	if len(opens) < 6 { // libpkg000..004 and the plugin, at least
		t.Fatalf("%d staged libraries opened, want the tree's 7:\n%s", len(opens), b)
	}
	for p, n := range opens {
		if n != 1 {
			t.Errorf("%s: the staged copy was opened %d times, want once (by ld.so)", p, n)
		}
	}
}

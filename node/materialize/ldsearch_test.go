package materialize

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/loader/stagefmt"
)

// The probe against this machine's real ld.so: the rules must name the
// directory itself last and at least one default directory.
func TestProbeSearchRulesOfThisNode(t *testing.T) {
	dir := t.TempDir()
	if err := stagefmt.WriteShim(filepath.Join(dir, stagefmt.ShimDir)); err != nil {
		t.Fatal(err)
	}
	ldso, _, err := nodeLdso()
	if err == nil {
		defer ldso.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	rules, err := probeSearchRules(context.Background(), ldso, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	caps, dirs := splitRules(t, rules)
	if len(caps) == 0 || caps[len(caps)-1] != "" || len(dirs) == 0 {
		t.Fatalf("rules %q", rules)
	}
	// glibc >= 2.33 on x86-64 probes glibc-hwcaps subdirectories when the CPU
	// supports x86-64-v2 (every x86-64 CPU of the last decade).
	if _, err := os.Stat("/lib64/ld-linux-x86-64.so.2"); err == nil && !strings.Contains(string(rules), "cap glibc-hwcaps/x86-64-v2/\n") {
		t.Errorf("no glibc-hwcaps/x86-64-v2 in %q", rules)
	}
	if len(probeLibrary) <= 255 {
		t.Errorf("the probe's library name is %d bytes: a file could have it", len(probeLibrary))
	}
	if _, err := os.Lstat(filepath.Join(dir, probeDir)); err == nil {
		t.Errorf("the probe left %s in the stage", probeDir)
	}
}

func splitRules(t *testing.T, rules []byte) (caps, dirs []string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(string(rules), "\n"), "\n")
	if lines[0] != "dlbundle-search 1" {
		t.Fatalf("header %q", lines[0])
	}
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
	return caps, dirs
}

// TestParseSearchRulesRecorded: what the probe printed on glibc 2.31
// (Debian 11, no ld.so --help), 2.36 (Debian 12) and 2.41 (Debian 13) on
// x86-64 and 2.36 on arm64 (under qemu-user), recorded in the chroots of
// mk/chroot.sh (testdata/ldso/README).
func TestParseSearchRulesRecorded(t *testing.T) {
	legacy := []string{"tls/haswell/avx512_1/x86_64/", "tls/haswell/avx512_1/", "tls/haswell/x86_64/", "tls/haswell/",
		"tls/avx512_1/x86_64/", "tls/avx512_1/", "tls/x86_64/", "tls/", "haswell/avx512_1/x86_64/", "haswell/avx512_1/",
		"haswell/x86_64/", "haswell/", "avx512_1/x86_64/", "avx512_1/", "x86_64/", ""}
	hwcaps := []string{"glibc-hwcaps/x86-64-v4/", "glibc-hwcaps/x86-64-v3/", "glibc-hwcaps/x86-64-v2/"}
	debian := []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib", "/usr/lib"}
	for _, c := range []struct {
		file       string
		caps, dirs []string
	}{
		{"bullseye-amd64-2.31.txt", legacy, debian},
		{"bookworm-amd64-2.36.txt", append(hwcaps, legacy...), debian},
		{"trixie-amd64-2.41.txt", append(hwcaps, ""), debian},
		{"bookworm-arm64-2.36.txt", []string{"tls/aarch64/atomics/", "tls/aarch64/", "tls/atomics/", "tls/",
			"aarch64/atomics/", "aarch64/", "atomics/", ""},
			[]string{"/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib", "/usr/lib"}},
	} {
		b, err := os.ReadFile(filepath.Join("testdata", "ldso", c.file))
		if err != nil {
			t.Fatal(err)
		}
		rules, err := parseSearchRules(string(b), probeDir)
		if err != nil {
			t.Errorf("%s: %v", c.file, err)
			continue
		}
		caps, dirs := splitRules(t, rules)
		if strings.Join(caps, ",") != strings.Join(c.caps, ",") || strings.Join(dirs, ",") != strings.Join(c.dirs, ",") {
			t.Errorf("%s: subdirectories %q, directories %q; want %q, %q", c.file, caps, dirs, c.caps, c.dirs)
		}
	}
}

// TestHelpSystemDirs: the default directories from ld.so --help (glibc
// 2.36, recorded).
func TestHelpSystemDirs(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "ldso", "bookworm-amd64-2.36.help"))
	if err != nil {
		t.Fatal(err)
	}
	got := helpSystemDirs(string(b))
	if want := "/lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib /usr/lib"; strings.Join(got, " ") != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := helpSystemDirs("ld.so: unrecognized option '--help'\n"); len(got) != 0 {
		t.Errorf("no system directories in an error: %q", got)
	}
}

func TestParseSearchRules(t *testing.T) {
	llp := "\t search path=/s/glibc-hwcaps/x86-64-v3:/s/tls:/s\t\t(LD_LIBRARY_PATH)\n"
	sys := "\t search path=/lib/glibc-hwcaps/x86-64-v3:/lib/tls:/lib:/usr/lib/glibc-hwcaps/x86-64-v3:/usr/lib/tls:/usr/lib\t\t(system search path)\n"
	got, err := parseSearchRules(llp+"\t search cache=/etc/ld.so.cache\n"+sys, "/s")
	if err != nil {
		t.Fatal(err)
	}
	want := "dlbundle-search 1\ncap glibc-hwcaps/x86-64-v3/\ncap tls/\ncap \ndir /lib\ndir /usr/lib\n"
	if string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
	for name, dbg := range map[string]string{
		"no search":        "",
		"no system path":   llp,
		"system path only": sys,
		"foreign dir":      "search path=/other/x:/s\t\t(LD_LIBRARY_PATH)\n" + sys,
		"not last":         "search path=/s:/s/tls\t\t(LD_LIBRARY_PATH)\n" + sys,
		"newline name":     "search path=/s/a\n:/s\t\t(LD_LIBRARY_PATH)\n" + sys,
		"short system":     llp + "search path=/lib/tls:/lib\t\t(system search path)\n",
		"other subdirs":    llp + "search path=/lib/glibc-hwcaps/x86-64-v3:/lib/x86_64:/lib\t\t(system search path)\n",
		"relative system":  llp + "search path=lib/glibc-hwcaps/x86-64-v3:lib/tls:lib\t\t(system search path)\n",
	} {
		if _, err := parseSearchRules(dbg, "/s"); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzParseSearchRules(f *testing.F) {
	f.Add("search path=/s/tls:/s\t\t(LD_LIBRARY_PATH)\nsearch path=/usr/lib/tls:/usr/lib\t\t(system search path)\n")
	f.Fuzz(func(t *testing.T, debug string) {
		rules, err := parseSearchRules(debug, "/s")
		if err != nil {
			return
		}
		// what audit.c's reader accepts: header, then "cap X/" lines ending
		// with "cap ", then "dir /..." lines, all shorter than its buffer
		if err := stagefmt.CheckSearchRules(rules); err != nil {
			t.Fatalf("%q: %v", rules, err)
		}
		lines := strings.Split(strings.TrimSuffix(string(rules), "\n"), "\n")
		if len(rules) >= 4000 || lines[0] != "dlbundle-search 1" {
			t.Fatalf("rules %q", rules)
		}
		for _, l := range lines[1:] {
			if !strings.HasPrefix(l, "cap ") && !strings.HasPrefix(l, "dir /") || strings.ContainsRune(l, 0) {
				t.Fatalf("line %q in %q", l, rules)
			}
		}
	})
}

// TestSearchRulesKeptPerNode: the first cold stage of a stage dir probes the
// node's ld.so and keeps the rules in the stage dir; the next one reads them
// (the first rank of every job once paid for ld.so runs). Kept rules
// that another user could have written, or under another key, are not used.
func TestSearchRulesKeptPerNode(t *testing.T) {
	stageDir := t.TempDir() // 0700, ours: as OpenStageDir makes a stage dir
	newStage := func() string {
		dir, err := os.MkdirTemp(stageDir, "tmp.")
		if err != nil {
			t.Fatal(err)
		}
		if err := stagefmt.WriteShim(filepath.Join(dir, stagefmt.ShimDir)); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	probed, err := nodeSearchRules(context.Background(), newStage())
	if err != nil {
		t.Fatal(err)
	}
	kept, _ := filepath.Glob(filepath.Join(stageDir, searchCachePrefix+"*"))
	if len(kept) != 1 {
		t.Fatalf("kept rules %q, want one file", kept)
	}
	if b, err := os.ReadFile(kept[0]); err != nil || !bytes.Equal(b, probed) {
		t.Fatalf("kept %q, probed %q (%v)", b, probed, err)
	}
	// A marked copy under the same name is what the next stage gets: it
	// was read, not probed.
	marked := append(bytes.Clone(probed), "dir /kept-copy\n"...)
	replaceKept := func(b []byte, mode os.FileMode, uid int) {
		t.Helper()
		os.Remove(kept[0])
		if err := os.WriteFile(kept[0], b, mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(kept[0], mode)
		if err := os.Chown(kept[0], uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	replaceKept(marked, 0o444, os.Geteuid())
	if got, err := nodeSearchRules(context.Background(), newStage()); err != nil || !bytes.Equal(got, marked) {
		t.Fatalf("second stage: %q (%v); want the kept rules %q", got, err, marked)
	}
	// Not trusted: another user's file, one others can write, a symlink,
	// and one in a stage dir others can write into.
	if os.Geteuid() == 0 {
		replaceKept(marked, 0o444, 1001)
		if got, _ := nodeSearchRules(context.Background(), newStage()); !bytes.Equal(got, probed) {
			t.Errorf("rules kept by uid 1001 were used: %q", got)
		}
	}
	replaceKept(marked, 0o666, os.Geteuid())
	if got, _ := nodeSearchRules(context.Background(), newStage()); !bytes.Equal(got, probed) {
		t.Errorf("rules writable by others were used: %q", got)
	}
	other := filepath.Join(t.TempDir(), "planted")
	if err := os.WriteFile(other, marked, 0o444); err != nil {
		t.Fatal(err)
	}
	os.Remove(kept[0])
	if err := os.Symlink(other, kept[0]); err != nil {
		t.Fatal(err)
	}
	if got, _ := nodeSearchRules(context.Background(), newStage()); !bytes.Equal(got, probed) {
		t.Errorf("rules through a symlink were used: %q", got)
	}
	replaceKept(marked, 0o444, os.Geteuid())
	if err := os.Chmod(stageDir, 0o777); err != nil {
		t.Fatal(err)
	}
	got, _ := nodeSearchRules(context.Background(), newStage())
	os.Chmod(stageDir, 0o700)
	if !bytes.Equal(got, probed) {
		t.Errorf("rules in a stage dir others can write were used: %q", got)
	}
	// Another hwcaps setting is another key.
	t.Setenv("GLIBC_TUNABLES", "glibc.cpu.hwcaps=-AVX2:glibc.malloc.check=0")
	if _, err := nodeSearchRules(context.Background(), newStage()); err != nil {
		t.Fatal(err)
	}
	if k, _ := filepath.Glob(filepath.Join(stageDir, searchCachePrefix+"*")); len(k) != 2 {
		t.Errorf("GLIBC_TUNABLES=glibc.cpu.hwcaps=... kept %q, want a second key", k)
	}
	if tmps, _ := filepath.Glob(filepath.Join(stageDir, "tmp.ldsearch-*")); len(tmps) != 0 {
		t.Errorf("temp files left: %q", tmps)
	}
}

func TestLdProbeEnv(t *testing.T) {
	got := ldProbeEnv([]string{"PATH=/bin", "LD_PRELOAD=/x.so", "LD_HWCAP_MASK=0x3",
		"GLIBC_TUNABLES=glibc.malloc.check=3:glibc.cpu.hwcaps=-AVX2_Usable:glibc.cpu.hwcap_mask=1", "LD_LIBRARY_PATH=/y"})
	want := []string{"GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX2_Usable:glibc.cpu.hwcap_mask=1", "LD_HWCAP_MASK=0x3"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := ldProbeEnv([]string{"GLIBC_TUNABLES=glibc.malloc.check=3"}); len(got) != 0 {
		t.Errorf("tunables without hwcaps: %q", got)
	}
}

// The probe ran "ld.so --help" with the stager's whole environment (a nil
// exec.Cmd.Env): LD_PRELOAD, GLIBC_TUNABLES and any secret reached it, and
// an LD_LIBRARY_PATH entry "/tmp/evil (system search path)\nz" made --help
// print a line that wrote "dir /tmp/evil" first in the node's kept rules,
// which later clean stages reused. The probe now runs with its own
// environment only: the rules under such an environment are those of a
// clean one, and nothing of it is kept.
func TestProbeIgnoresStagersEnvironment(t *testing.T) {
	newStage := func(stageDir string) string {
		dir, err := os.MkdirTemp(stageDir, "tmp.")
		if err != nil {
			t.Fatal(err)
		}
		if err := stagefmt.WriteShim(filepath.Join(dir, stagefmt.ShimDir)); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	clean, err := nodeSearchRules(context.Background(), newStage(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("LD_LIBRARY_PATH", "/tmp/evil (system search path)\nz")
	t.Setenv("LD_PRELOAD", "/nonexistent/dlbundle-test-preload.so")
	stageDir := t.TempDir()
	got, err := nodeSearchRules(context.Background(), newStage(stageDir))
	if err != nil || !bytes.Equal(got, clean) || bytes.Contains(got, []byte("/tmp/evil")) {
		t.Fatalf("rules probed under a hostile LD_LIBRARY_PATH: %q (%v); want those of a clean environment %q", got, err, clean)
	}
	kept, _ := filepath.Glob(filepath.Join(stageDir, searchCachePrefix+"*"))
	for _, k := range kept {
		if b, _ := os.ReadFile(k); bytes.Contains(b, []byte("evil")) {
			t.Errorf("kept rules %s hold the stager's LD_LIBRARY_PATH: %q", k, b)
		}
	}
}

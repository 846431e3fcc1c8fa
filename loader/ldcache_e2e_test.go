package loader

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/internal/clitest"
)

// TestStagedCacheAnswersReplaceTheCache: staging keeps the node's
// /etc/ld.so.cache answers for the image's libraries, so a served process
// whose searches they answer opens no cache (natively ld.so maps and unmaps
// it in every process), only stats it. A library the image lacks (a dlopen of
// the node's libz) is looked up in the cache itself, and so is everything
// once the cache is not the one the answers came from: the same libraries
// load in all three cases, as natively.
func TestStagedCacheAnswersReplaceTheCache(t *testing.T) {
	needTools(t, "strace", "gcc")
	if _, err := os.Stat("/etc/ld.so.cache"); err != nil {
		t.Fatalf("this test needs the node's ld.so cache: %v", err)
	}
	bin := clitest.CLI(t)
	dir := t.TempDir()
	env := clitest.CleanEnv(dir)
	src := filepath.Join(dir, "app.c")
	if err := os.WriteFile(src, []byte(`#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
	if (argc > 1) {
		void *h = dlopen(argv[1], RTLD_NOW);
		printf("%s: %s\n", argv[1], h ? "loaded" : dlerror());
	}
	puts("ok");
	return 0;
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	app := filepath.Join(dir, "app")
	if out, err := exec.Command("gcc", "-O1", "-o", app, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	tr := filepath.Join(dir, "app.trace")
	runIn(t, dir, env, bin, "trace", "-q", "-o", tr, "--", app)
	img := filepath.Join(dir, "app.dlimg")
	runIn(t, dir, env, bin, "build", "-o", img, tr)
	stage := filepath.Join(dir, "stage")
	runIn(t, dir, env, bin, "exec", "--stage-dir", stage, img, "--", app) // cold: stages
	// warm runs under strace: the cache's opens and stats, and the output
	run := func(args ...string) (out string, opens, stats int) {
		t.Helper()
		log := filepath.Join(dir, "warm.strace")
		argv := append([]string{"-f", "-qq", "-e", "trace=open,openat,stat,newfstatat", "-o", log, bin, "exec", "--stage-dir", stage, img, "--", app}, args...)
		out = runIn(t, dir, env, "strace", argv...)
		b, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if !strings.Contains(l, `"/etc/ld.so.cache"`) {
				continue
			}
			if strings.Contains(l, "open") {
				opens++
			} else {
				stats++
			}
		}
		return out, opens, stats
	}
	if out, opens, stats := run(); out != "ok\n" || opens != 0 || stats != 1 {
		t.Errorf("served, the answers staged: %q, %d opens and %d stats of the cache, want \"ok\", 0 and 1", out, opens, stats)
	}
	native := runIn(t, dir, env, app, "libz.so.1")
	if !strings.Contains(native, "libz.so.1: loaded") {
		t.Fatalf("natively: %q; the test needs the node's libz.so.1", native)
	}
	// (audit.so reads the cache for it; its answer lies outside the image,
	// so ld.so searches, and reads the cache too)
	if out, opens, _ := run("libz.so.1"); out != native || opens < 1 {
		t.Errorf("served, a library the image lacks: %q, %d opens of the cache, want %q and the cache read", out, opens, native)
	}
	// Another cache than the answers': the section's identity no longer
	// matches (a digit of the device number changed in the table's room).
	tabs, _ := filepath.Glob(filepath.Join(stage, "sha256-*", "table"))
	if len(tabs) != 1 {
		t.Fatalf("stage tables: %v", tabs)
	}
	tab, err := os.ReadFile(tabs[0])
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(tab, []byte("\ncache "))
	if i < 0 {
		t.Fatal("the stage's table holds no cache answers")
	}
	d := &tab[i+len("\ncache ")]
	*d = '0' + (*d-'0'+1)%10
	if err := os.Chmod(tabs[0], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tabs[0], tab, 0o444); err != nil {
		t.Fatal(err)
	}
	if out, opens, _ := run(); out != "ok\n" || opens < 1 {
		t.Errorf("served, a cache the answers did not come from: %q, %d opens of the cache, want \"ok\" and the cache read", out, opens)
	}
}

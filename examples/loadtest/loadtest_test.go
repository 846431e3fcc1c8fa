package loadtest

import (
	"context"
	"debug/elf"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestTinyBuildHasTheCLoadtestShape builds the smallest configuration with
// gcc and checks what the benchmark relies on: the program runs and reaches
// every library and plugin, chains are DT_NEEDED links, libraries are spread
// over directories searched through RUNPATH (not RPATH).
func TestTinyBuildHasTheCLoadtestShape(t *testing.T) {
	c := Tiny()
	c.OutputDir = t.TempDir()
	app, err := Build(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(app).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", app, err, out)
	}
	if want := fmt.Sprintf("loadtest ok %d %d ", c.Libs, c.Plugins); !strings.HasPrefix(string(out), want) {
		t.Errorf("output %q, want prefix %q", out, want)
	}

	needed, runpath := dynamic(t, app)
	if want := []string{"liblt0.so", "liblt3.so"}; !containsAll(needed, want) {
		t.Errorf("app needs %v, want the chain heads %v", needed, want)
	}
	if !strings.Contains(runpath, "$ORIGIN/lib/d0:$ORIGIN/lib/d1") || !strings.HasSuffix(runpath, "$ORIGIN/plugins") {
		t.Errorf("app RUNPATH %q, want every library dir then the plugins", runpath)
	}
	// liblt0 -> liblt1 -> liblt2 is one chain; liblt1 lives in d1.
	needed, runpath = dynamic(t, filepath.Join(c.OutputDir, "lib/d0/liblt0.so"))
	if !slices.Contains(needed, "liblt1.so") || !strings.Contains(runpath, "$ORIGIN/../../lib/d1") {
		t.Errorf("liblt0.so needs %v with RUNPATH %q, want liblt1.so found through d1", needed, runpath)
	}
	if needed, _ = dynamic(t, filepath.Join(c.OutputDir, "lib/d0/liblt2.so")); slices.Contains(needed, "liblt3.so") {
		t.Errorf("a chain's tail needs %v: chains must end", needed)
	}
}

func dynamic(t *testing.T, path string) (needed []string, runpath string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	needed, _ = f.DynString(elf.DT_NEEDED)
	rp, _ := f.DynString(elf.DT_RUNPATH)
	if rpath, _ := f.DynString(elf.DT_RPATH); len(rpath) > 0 {
		t.Errorf("%s has DT_RPATH %v; the generator asks for RUNPATH", path, rpath)
	}
	return needed, strings.Join(rp, ":")
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

func TestBadSizesAreRefusedWithTheirValues(t *testing.T) {
	c := Tiny()
	c.OutputDir = t.TempDir()
	c.Libs = 0
	if _, err := Build(context.Background(), c); err == nil || !strings.Contains(err.Error(), "libs 0") {
		t.Errorf("Libs 0: %v", err)
	}
}

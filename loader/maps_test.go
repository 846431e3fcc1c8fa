package loader

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/treeimage"
	"github.com/dlbundle/dlbundle/loader/stagefmt"
)

// mapsProbe prints the files mapped into the process after start-up and
// after a dlopen that ld.so (and the audit object's search) answers from
// /etc/ld.so.cache.
const mapsProbe = `#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
int probe_dep_value(void);
static void files(const char *when)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[8192];
	while (f && fgets(line, sizeof line, f)) {
		char *p = strchr(line, '/');
		if (p) printf("%s %s", when, p);
	}
	if (f) fclose(f);
}
int main(void)
{
	files("start");
	if (!dlopen("libm.so.6", RTLD_NOW)) return 1;
	files("dlopen");
	return probe_dep_value() != 23;
}
`

// TestMapsShowNoShimFiles: /proc/self/maps under the
// shim shows the files it shows natively, plus only the documented shim
// objects and table. The audit object kept /etc/ld.so.cache mapped after
// its search had read it (ld.so unmaps its own at the end of start-up and
// of every dlopen).
func TestMapsShowNoShimFiles(t *testing.T) {
	root := t.TempDir()
	T := filepath.Join(root, "tree")
	for _, d := range []string{"bin", "lib"} {
		if err := os.MkdirAll(filepath.Join(T, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	src := filepath.Join(root, "maps.c")
	if err := os.WriteFile(src, []byte(mapsProbe), 0o644); err != nil {
		t.Fatal(err)
	}
	lib, bin := filepath.Join(T, "lib"), filepath.Join(T, "bin", "maps")
	for _, args := range [][]string{
		{"-shared", "-fPIC", "-o", filepath.Join(lib, "libdep.so"), "testdata/libdep.c"},
		{"-o", bin, src, "-Wl,--no-as-needed", "-L" + lib, "-ldep", "-ldl", "-Wl,-rpath,$ORIGIN/../lib"},
	} {
		if out, err := exec.Command("gcc", append([]string{"-O1"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", args, err, out)
		}
	}
	var entries []image.Entry
	for _, e := range treeimage.Entries(t, T) {
		if e.Path == T || strings.HasPrefix(e.Path, T+"/") {
			entries = append(entries, e)
		}
	}
	stage := stageEntries(t, root, entries)
	staged, ok := StagedPath(stage, bin)
	if !ok {
		t.Fatalf("StagedPath(%s): not bundled", bin)
	}
	files := func(out, stage string) []string {
		seen := map[string]bool{}
		var fs []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if stage != "" && strings.Contains(l, stage+"/") {
				// documented: the shim objects and the table
				if strings.Contains(l, stage+"/"+stagefmt.ShimDir+"/") || strings.HasSuffix(l, stage+"/table") {
					continue
				}
			}
			if !seen[l] {
				seen[l] = true
				fs = append(fs, l)
			}
		}
		sort.Strings(fs)
		return fs
	}
	env := probeEnv(root)
	native := files(runProbe(t, "", []string{bin}, env), "")
	shim := files(runProbe(t, staged, []string{bin}, ShimEnv(stage, env, EnvOptions{})), stage)
	if strings.Join(native, "\n") != strings.Join(shim, "\n") {
		t.Errorf("files mapped natively:\n%s\nunder the shim (without its documented objects and table):\n%s",
			strings.Join(native, "\n"), strings.Join(shim, "\n"))
	}
}

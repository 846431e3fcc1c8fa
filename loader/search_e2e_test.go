package loader

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/internal/clitest"
)

// TestSearchOpensEachStagedLibraryOnce: on a warm stage, each library ld.so
// loads from the stage is opened once, by ld.so: the audit object's search
// takes "ELF of this node" from the table (flag set at staging,
// stagefmt.MarkNodeELF) instead of opening the staged copy to read its header first.
// The spack tree's app loads every package's library through its RUNPATH.
func TestSearchOpensEachStagedLibraryOnce(t *testing.T) {
	needTools(t, "strace", "gcc", "/usr/bin/python3")
	bin := clitest.CLI(t)
	dir := t.TempDir()
	app, _ := spackTree(t, dir, 5)
	env := clitest.CleanEnv(dir)
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

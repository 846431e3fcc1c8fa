package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/internal/clitest"
)

// LD_PRELOAD splits on spaces and colons, LD_AUDIT on colons, and both
// expand $LIB and the like: with --stage-dir "/dev/shm/v dir" run from
// /tmp, the victim loaded "dir/sha256-<digest>/shim/preload-<glibc>.so" from
// /tmp, which uid 1001 had put there. Such a stage dir is refused before
// anything is created, by exec as uid 1002, and the app does not run.
func TestStageDirThatLoaderWouldSplitRefused(t *testing.T) {
	needRoot(t)
	p := clitest.NewProbeImage(t)
	makePublic(t, p.Work)
	top := publicDir(t)
	cli := publicCLI(t, top)
	victim := filepath.Join(top, "victim")
	if err := os.Mkdir(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chown(victim, victimUID, victimUID)
	for _, c := range []struct{ name, want string }{
		{"v dir", "contains a space"},
		{"a:b", "contains a colon"},
		{"x$LIB", "contains a '$'"},
		{"n\nl", "contains a control character"},
	} {
		stage := filepath.Join(victim, c.name)
		out, code := runAs(t, victimUID, clitest.CleanEnv(victim), cli, "exec", "--stage-dir", stage, p.Image, "--", p.Original)
		if code == 0 || strings.Contains(out, "exe=") || !strings.Contains(out, c.want) || !strings.Contains(out, "give a stage dir without spaces, colons") {
			t.Errorf("--stage-dir %q: exit %d; want a refusal saying %q, and the app not run:\n%s", stage, code, c.want, out)
		}
		if _, err := os.Lstat(stage); err == nil {
			t.Errorf("--stage-dir %q was created", stage)
		}
	}
}

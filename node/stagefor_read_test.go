package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/internal/clitest"
)

// TestStageForReadsAsTheJobsUser: root staging for a job's user decides
// whether that user may read the image by the kernel, as the user. The
// victim's 0600 image in the victim's 0700 home, staged by root for the
// attacker's job (stage --user 1001), is refused with a message naming the
// cause, and nothing of it reaches the attacker's stage dir; the same image
// made readable by the attacker (0644 in a 0755 home) stages.
func TestStageForReadsAsTheJobsUser(t *testing.T) {
	needRoot(t)
	p := clitest.NewProbeImage(t)
	top := publicDir(t)
	cli := publicCLI(t, top)
	home := userDir(t, top, "victim", victimUID)
	img := filepath.Join(home, "app.dlimg")
	b, err := os.ReadFile(p.Image)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img, b, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chown(img, victimUID, victimUID)
	if err := os.Chmod(home, 0o700); err != nil {
		t.Fatal(err)
	}
	attackerHome := userDir(t, top, "attacker", attackerUID)
	stage := filepath.Join(attackerHome, "stage")
	env := clitest.CleanEnv(attackerHome)

	out, code := runAs(t, 0, env, cli, "stage", "--user", "1001:1001", "--stage-dir", stage, img)
	if code == 0 || !strings.Contains(out, "uid 1001 may not read it") {
		t.Fatalf("root staging the victim's private image for uid 1001: exit %d, want a refusal naming the cause:\n%s", code, out)
	}
	if ents, _ := filepath.Glob(filepath.Join(stage, "sha256-*")); len(ents) != 0 {
		t.Fatalf("a stage of the victim's image was made for uid 1001: %v", ents)
	}
	// Readable by the attacker: staged (the check is readability, not owners).
	os.Chmod(home, 0o755)
	os.Chmod(img, 0o644)
	out, code = runAs(t, 0, env, cli, "stage", "--user", "1001:1001", "--stage-dir", stage, img)
	if code != 0 || !strings.HasPrefix(out, "staged ") {
		t.Fatalf("root staging a world-readable image of the victim's for uid 1001: exit %d:\n%s", code, out)
	}
}

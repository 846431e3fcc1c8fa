package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/image/registry"
	"github.com/dlbundle/dlbundle/image/registry/registrytest"
	"github.com/dlbundle/dlbundle/internal/clitest"
)

// exec oci:// against a real registry server (Debian's docker-registry):
// a pushed image runs from the stage; a blob tampered with in the registry's
// storage is refused and leaves nothing in the stage; a deleted tag is a
// clear "not found".
func TestExecOCIRealRegistry(t *testing.T) {
	addr, storage := registrytest.StartDistribution(t)
	p := clitest.NewProbeImage(t)
	ctx := context.Background()

	good := "oci://" + addr + "/apps/probe:v1"
	if _, err := registry.Push(ctx, p.Image, good, registry.Options{}); err != nil {
		t.Fatal(err)
	}
	stage := filepath.Join(p.Work, "stage")
	out, stderr, _, state := clitest.RunCLI(t, append(clitest.CleanEnv(p.Work), "SLURM_JOB_ID=91"), "exec", "--stage-dir", stage, good, "--", p.Original, "exit7")
	if state.ExitCode() != 7 || clitest.Field(out, "argv0") != p.Original {
		t.Fatalf("exec %s: status %d, stdout %q, stderr %q", good, state.ExitCode(), out, stderr)
	}

	// Tamper: push the same image under another tag, then flip a byte of the
	// stored blob. A fresh stage dir forces a download.
	bad := "oci://" + addr + "/apps/tampered:v1"
	if _, err := registry.Push(ctx, p.Image, bad, registry.Options{}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(p.Image)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	blob := registrytest.BlobFile(storage, "sha256:"+hex.EncodeToString(sum[:]))
	stored, err := os.ReadFile(blob)
	if err != nil {
		t.Fatalf("blob not where the registry keeps it: %v", err)
	}
	stored[len(stored)/2] ^= 0xff
	if err := os.WriteFile(blob, stored, 0o644); err != nil {
		t.Fatal(err)
	}
	stage2 := filepath.Join(p.Work, "stage2")
	_, stderr, _, state = clitest.RunCLI(t, append(clitest.CleanEnv(p.Work), "SLURM_JOB_ID=92"), "exec", "--stage-dir", stage2, bad, "--", p.Original, "exit7")
	if state.ExitCode() == 7 || state.ExitCode() == 0 {
		t.Fatalf("exec of a tampered blob ran the app (status %d)", state.ExitCode())
	}
	if !strings.Contains(stderr, "digest") {
		t.Errorf("tampered blob: error does not mention the digest: %q", stderr)
	}
	for _, pattern := range []string{"sha256-*", "tmp.*"} {
		if left, _ := filepath.Glob(filepath.Join(stage2, pattern)); len(left) != 0 {
			t.Errorf("tampered blob left %v in the stage dir", left)
		}
	}

	// Unknown tag: a clear not-found error, app not run.
	_, stderr, _, state = clitest.RunCLI(t, append(clitest.CleanEnv(p.Work), "SLURM_JOB_ID=93"), "exec", "--stage-dir", stage2, "oci://"+addr+"/apps/probe:nosuchtag", "--", p.Original, "exit7")
	if state.ExitCode() == 7 || !strings.Contains(stderr, "not found") {
		t.Errorf("unknown tag: status %d, stderr %q", state.ExitCode(), stderr)
	}
}

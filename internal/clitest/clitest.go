package clitest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/dlbundle/dlbundle/image"
)

var (
	cliOnce sync.Once
	cliBin  string
	cliErr  error
)

// CLI builds the CLI once per test binary with the flags make uses
// (CGO_ENABLED=0, -trimpath), so that after make it only relinks. It goes to
// one fixed place per user and source tree (replaced atomically by each
// run), so test runs leave no pile of temp dirs behind, and runs from other
// checkouts (git worktrees) do not replace it with their own build.
func CLI(t testing.TB) string {
	t.Helper()
	cliOnce.Do(func() {
		dir := filepath.Join(os.TempDir(), fmt.Sprintf("dlbundle-test-cli-%d", os.Getuid()))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			cliErr = err
			return
		}
		tmp := filepath.Join(dir, fmt.Sprintf("dlbundle.%d", os.Getpid()))
		cmd := exec.Command("go", "build", "-trimpath", "-o", tmp, "github.com/dlbundle/dlbundle/cmd/dlbundle")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			cliErr = fmt.Errorf("go build ./cmd/dlbundle: %v\n%s", err, out)
			return
		}
		wd, _ := os.Getwd()
		sum := sha256.Sum256([]byte(wd))
		cliBin = filepath.Join(dir, "dlbundle-"+hex.EncodeToString(sum[:6]))
		cliErr = os.Rename(tmp, cliBin)
	})
	if cliErr != nil {
		t.Fatal(cliErr)
	}
	return cliBin
}

// CleanEnv is the environment every program of these tests runs in: fixed,
// so that pyenv shims, PYTHONPATH or user .pth files cannot change it.
func CleanEnv(home string) []string {
	return []string{"PATH=/usr/bin:/bin", "HOME=" + home, "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1"}
}

const probeSource = `#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
	char exe[4096];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	exe[n < 0 ? 0 : n] = 0;
	printf("argv0=%s\nexe=%s\npid=%d\n", argv[0], exe, (int)getpid());
	for (int i = 1; i < argc; i++) printf("arg=%s\n", argv[i]);
	fflush(stdout);
	if (argc > 1 && !strcmp(argv[1], "kill")) raise(SIGTERM);
	if (argc > 1 && !strcmp(argv[1], "exit7")) return 7;
	return 0;
}
`

// ProbeImage is a gcc-built probe (probeSource) bundled in a real image
// (written by image.Write) at a path that does NOT exist on this machine,
// so it can only run from the stage.
type ProbeImage struct {
	Image    string // the .dlimg
	Original string // where the probe is bundled (absent from this machine)
	Native   string // the same program on the file system
	Work     string
}

// NewProbeImage compiles the probe and writes its image into a t.TempDir.
func NewProbeImage(t *testing.T) *ProbeImage {
	t.Helper()
	work := t.TempDir()
	sum := sha256.Sum256([]byte(t.Name() + work))
	original := "/opt/dlbundle-test-" + hex.EncodeToString(sum[:6]) + "/bin/probe"
	if _, err := os.Lstat(filepath.Dir(filepath.Dir(original))); err == nil {
		t.Fatalf("%s exists on this machine; the test needs a path that does not", original)
	}
	p := &ProbeImage{Image: filepath.Join(work, "probe.dlimg"), Original: original, Native: filepath.Join(work, "probe"), Work: work}
	bundleProgram(t, probeSource, p.Native, p.Image, original)
	return p
}

// bundleProgram compiles the C program source to bin (its source beside it,
// bin.c) and writes img, an image that bundles bin at original.
func bundleProgram(t *testing.T, source, bin, img, original string) {
	t.Helper()
	src := bin + ".c"
	if err := os.WriteFile(src, []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-O1", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	st, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := image.Write(f, []image.Entry{{Path: original, Type: image.TypeRegular, Mode: 0o100755, Size: st.Size(),
		MtimeNS: st.ModTime().UnixNano(), Kind: image.KindELFExec, SourcePath: bin}}, image.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// RunCLI runs the CLI and returns stdout, stderr and the process state.
func RunCLI(t *testing.T, env []string, args ...string) (stdout, stderr string, pid int, state *os.ProcessState) {
	t.Helper()
	cmd := exec.Command(CLI(t), args...)
	cmd.Env = env
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return out.String(), errb.String(), cmd.Process.Pid, cmd.ProcessState
}

// Field is the value of the first line key=VALUE of out ("" if none).
func Field(out, key string) string {
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, key+"="); ok {
			return v
		}
	}
	return ""
}

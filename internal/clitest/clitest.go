package clitest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/dlbundle/dlbundle/image"
)

var builds sync.Map // GOARCH -> *build

type build struct {
	once sync.Once
	bin  string
	err  error
}

// Build builds the CLI for linux/goarch ("" for this machine's) once per test
// binary, with the flags make uses (CGO_ENABLED=0, -trimpath), so that after
// make it only relinks. It goes to one fixed place per user, source tree and
// architecture (replaced atomically by each run), so test runs leave no pile
// of temp dirs behind, and runs from other checkouts (git worktrees) do not
// replace it with their own build. It returns an error rather than failing a
// test, for TestMain; tests call CLI or CLIFor.
func Build(goarch string) (string, error) {
	if goarch == "" {
		goarch = runtime.GOARCH
	}
	v, _ := builds.LoadOrStore(goarch, &build{})
	b := v.(*build)
	b.once.Do(func() {
		dir := filepath.Join(os.TempDir(), fmt.Sprintf("dlbundle-test-cli-%d", os.Getuid()))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			b.err = err
			return
		}
		tmp := filepath.Join(dir, fmt.Sprintf("dlbundle-%s.%d", goarch, os.Getpid()))
		cmd := exec.Command("go", "build", "-trimpath", "-o", tmp, "github.com/dlbundle/dlbundle/cmd/dlbundle")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build ./cmd/dlbundle for linux/%s: %v\n%s", goarch, err, out)
			return
		}
		wd, _ := os.Getwd()
		sum := sha256.Sum256([]byte(wd))
		b.bin = filepath.Join(dir, "dlbundle-"+goarch+"-"+hex.EncodeToString(sum[:6]))
		b.err = os.Rename(tmp, b.bin)
	})
	return b.bin, b.err
}

// CLI is this machine's CLI (Build), or the test fails.
func CLI(t testing.TB) string {
	t.Helper()
	return CLIFor(t, "")
}

// CLIFor is the CLI for linux/goarch (Build), or the test fails.
func CLIFor(t testing.TB, goarch string) string {
	t.Helper()
	bin, err := Build(goarch)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// LineDiff lists the lines where a and b differ, line by line (no
// alignment: the outputs compared have the same shape), each as its line
// number and both versions under the names nameA and nameB; at most limit
// lines (0: all), then how many more differ. "" when a == b.
func LineDiff(a, b, nameA, nameB string, limit int) string {
	if a == b {
		return ""
	}
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	w := max(len(nameA), len(nameB))
	var s strings.Builder
	n := 0
	for i := 0; i < len(la) || i < len(lb); i++ {
		var x, y string
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if x == y {
			continue
		}
		if n++; limit > 0 && n > limit {
			continue
		}
		fmt.Fprintf(&s, "line %d:\n  %-*s %s\n  %-*s %s\n", i+1, w+1, nameA+":", x, w+1, nameB+":", y)
	}
	if limit > 0 && n > limit {
		fmt.Fprintf(&s, "... and %d more differing lines\n", n-limit)
	}
	return s.String()
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

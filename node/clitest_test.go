package node

// The package's names for the helpers it shares with the tests of
// loader (internal/clitest).

import (
	"os"
	"testing"

	"github.com/dlbundle/dlbundle/internal/clitest"
)

func dlbundleCLI(t testing.TB) string { return clitest.CLI(t) }
func cleanEnv(home string) []string   { return clitest.CleanEnv(home) }
func field(out, key string) string    { return clitest.Field(out, key) }
func runCLI(t *testing.T, env []string, args ...string) (stdout, stderr string, pid int, state *os.ProcessState) {
	t.Helper()
	return clitest.RunCLI(t, env, args...)
}

type probeImage struct {
	image    string // the .dlimg
	original string // where the probe is bundled (absent from this machine)
	native   string // the same program on the file system
	work     string
}

func newProbeImage(t *testing.T) *probeImage {
	t.Helper()
	p := clitest.NewProbeImage(t)
	return &probeImage{image: p.Image, original: p.Original, native: p.Native, work: p.Work}
}

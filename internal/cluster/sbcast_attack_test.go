package cluster

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/internal/clitest"
)

// pwnedImage writes into the shared file system the image the attacker
// plants: a program printing PWNED, bundled at p's original path.
func pwnedImage(t *testing.T, p *probe) string {
	t.Helper()
	img := filepath.Join(shared.Shared, "pwned.dlimg")
	clitest.PwnedImage(t, filepath.Join(shared.Dir, "src"), img, p.original)
	return img
}

// The sbcast attack, re-run as written: a root job follows the old sbcast
// recipe (the node copy at /tmp/dlbundle-$SLURM_JOB_ID.dlimg, job ids are
// public); user nobody (65534) plants its image at that name on every node
// after `stage --consume` freed it. All 12 root ranks printed "PWNED:
// attacker's program ran as uid 0". Every rank must run the consumed image.
// And where no copy arrived and nobody's file is at the name, root's stage
// and ranks refuse it on every node.
func TestSbcastPlantedImageNeverRuns(t *testing.T) {
	p := newProbe(t, "sbcast-attack")
	pwned := pwnedImage(t, p)
	nobody := "setpriv --reuid=65534 --regid=65534 --clear-groups"
	local := "/tmp/dlbundle-$SLURM_JOB_ID.dlimg"
	after := batch(t, fmt.Sprintf(`LOCAL=%[4]s
sbcast --force %[2]s "$LOCAL"
srun -N3 -n3 --ntasks-per-node=1 %[1]s stage --quiet --consume "$LOCAL"
srun -N3 -n3 --ntasks-per-node=1 %[5]s cp %[3]s "$LOCAL"
srun -N3 -n12 --ntasks-per-node=4 %[1]s exec "$LOCAL" -- %[6]s`, dlb, p.image[1], pwned, local, nobody, p.original), "-N3", "--ntasks-per-node=4")
	if strings.Contains(after, "PWNED") {
		t.Errorf("a root rank ran the image uid 65534 planted after --consume:\n%s", after)
	}
	ranks(t, after, 12, 1, p)

	// sbcast replaces whatever is at the path (nobody's file included), so
	// the owner check is seen where no copy arrives: nobody's file is all
	// there is at the name.
	before := batch(t, fmt.Sprintf(`LOCAL=%[3]s
srun -N3 -n3 --ntasks-per-node=1 %[4]s cp %[2]s "$LOCAL"
srun -N3 -n3 --ntasks-per-node=1 %[1]s stage --quiet --consume "$LOCAL"
srun -N3 -n12 --ntasks-per-node=4 %[1]s exec "$LOCAL" -- %[5]s`, dlb, pwned, local, nobody, p.original), "-N3", "--ntasks-per-node=4")
	if strings.Contains(before, "PWNED") || strings.Contains(before, "version=") {
		t.Errorf("a root rank ran something from uid 65534's file:\n%s", before)
	}
	if n := strings.Count(before, "owned by uid 65534"); n < 3+12 {
		t.Errorf("%d refusals naming uid 65534; want every node's stage and every rank:\n%s", n, before)
	}
}

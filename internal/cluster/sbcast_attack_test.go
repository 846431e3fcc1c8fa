package cluster

import (
	"fmt"
	"path/filepath"
	"strconv"
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

// The sbcast job script (examples/jobs/sbcast.sbatch, unchanged) against a
// hostile co-user, with real sbcast and srun: before the job, user nobody
// (65534) takes the job's stage dir name first on every node (mode 0777,
// a FIFO at .lock, a link to /tmp at a stage name), and at the guessable
// node-local names of the next job ids (/tmp/dlbundle-<id>.dlimg and
// /tmp/dlbundle-<id>) puts a link to a file of root's and a directory of
// its own. The job's ranks run from a stage of root's own (the squat's
// private fallback, with a warning naming uid 65534); the squat, the
// planted names and root's file are as they were.
func TestSbcastExampleSurvivesHostileCoUser(t *testing.T) {
	p := newProbe(t, "sbcast-hostile")
	r := runCmd(t, shared.Command("sbatch", "--parsable", "--wrap", "true"))
	last, err := strconv.Atoi(strings.TrimSpace(r.out))
	if err != nil {
		t.Fatalf("sbatch --parsable: %q", r.out)
	}
	stage := "/dev/shm/t-sbcast-hostile"
	var plant strings.Builder
	fmt.Fprintf(&plant, "set -e\necho root > /tmp/root-file; chmod 600 /tmp/root-file\n")
	nobody := "setpriv --reuid=65534 --regid=65534 --clear-groups --"
	fmt.Fprintf(&plant, "%s sh -c 'umask 0; mkdir -m 0777 %s; mkfifo -m 0666 %s/.lock; ln -s /tmp %s/sha256-%s'\n",
		nobody, stage, stage, stage, strings.Repeat("a", 64))
	for id := last + 1; id <= last+4; id++ {
		fmt.Fprintf(&plant, "%s sh -c 'ln -s /tmp/root-file /tmp/dlbundle-%d.dlimg; mkdir -m 0777 /tmp/dlbundle-%d'\n", nobody, id, id)
	}
	// What is planted, as stat sees it, and the squat's names.
	look := fmt.Sprintf("stat -c '%%N %%F %%U %%a' %s/.lock %s/sha256-*", stage, stage)
	for id := last + 1; id <= last+4; id++ {
		look += fmt.Sprintf(" /tmp/dlbundle-%d.dlimg /tmp/dlbundle-%d", id, id)
	}
	look += "; ls -A " + stage + "\n"
	plant.WriteString(look)
	before := map[string]string{}
	for _, n := range shared.Nodes {
		out, err := shared.OnNode(n, "sh", "-c", plant.String()).CombinedOutput()
		if err != nil {
			t.Fatalf("planting on %s: %v\n%s", n, err, out)
		}
		before[n] = string(out)
	}
	t.Cleanup(func() {
		for _, n := range shared.Nodes {
			shared.OnNode(n, "sh", "-c", fmt.Sprintf("rm -rf %s %s.* /tmp/root-file; for i in $(seq %d %d); do rm -rf /tmp/dlbundle-$i.dlimg /tmp/dlbundle-$i; done", stage, stage, last+1, last+4)).Run()
		}
	})

	out, job := example(t, "sbcast.sbatch", []string{"DLBUNDLE=" + dlb, "IMAGE=" + p.image[1], "APP=" + p.original, "DLBUNDLE_STAGE_DIR=" + stage},
		"-N3", "--ntasks-per-node=2")
	if n, _ := strconv.Atoi(job); n <= last || n > last+4 {
		t.Fatalf("job %s is not among the ids %d..%d planted for", job, last+1, last+4)
	}
	ranks(t, out, 6, 1, p)
	if !strings.Contains(out, "belongs to uid 65534") {
		t.Errorf("no warning naming uid 65534, whose stage dir the job could not use:\n%s", out)
	}
	check := "cat /tmp/root-file; " + look
	for _, n := range shared.Nodes {
		got, _ := shared.OnNode(n, "sh", "-c", check).CombinedOutput()
		if want := "root\n" + before[n]; string(got) != want {
			t.Errorf("%s after the job:\n%s\nwant root's file and the planted names as they were:\n%s", n, got, want)
		}
		if s := stagesOn(t, n, stage); len(s) != 1 || !strings.HasPrefix(s[0], "sha256-aaaa") {
			t.Errorf("%s: the squat holds %v, want only nobody's link", n, s)
		}
	}
}

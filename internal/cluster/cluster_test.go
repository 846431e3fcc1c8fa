package cluster

import (
	"os"
	"strings"
	"testing"
)

var shared *Cluster

// TestMain starts one cluster for every test of the package (start-up is
// the slow part) and stops it at the end.
func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.Stop()
	}
	os.Exit(code)
}

// get returns the package's cluster, starting it on first use.
func get(t *testing.T) *Cluster {
	t.Helper()
	if shared == nil {
		c, err := Start(Options{Nodes: 3})
		if err != nil {
			t.Fatal(err)
		}
		shared = c
	}
	return shared
}

// TestFakeNodesHavePrivateShm: srun reaches every node, and a file written to
// /dev/shm by a task on one node is invisible on the others.
func TestFakeNodesHavePrivateShm(t *testing.T) {
	c := get(t)
	out, err := c.Command("srun", "-N3", "--ntasks-per-node=1", "-l", "sh", "-c",
		`echo $SLURMD_NODENAME > /dev/shm/mark.$SLURM_PROCID; ls /dev/shm | tr '\n' ' '`).CombinedOutput()
	if err != nil {
		t.Fatalf("srun: %v\n%s\n%s", err, out, c.Logs())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 tasks:\n%s", out)
	}
	for _, l := range lines {
		if strings.Count(l, "mark.") != 1 {
			t.Errorf("a node sees another node's /dev/shm: %q", l)
		}
	}
	// The host's /dev/shm has none of them.
	if m, _ := os.ReadDir("/dev/shm"); len(m) > 0 {
		for _, e := range m {
			if strings.HasPrefix(e.Name(), "mark.") {
				t.Errorf("host /dev/shm has %s", e.Name())
			}
		}
	}
	on, err := c.OnNode("node2", "ls", "/dev/shm").Output()
	if err != nil || strings.Count(string(on), "mark.") != 1 {
		t.Errorf("node2's /dev/shm through nsenter: %q %v", on, err)
	}
}

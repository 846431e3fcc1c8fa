package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/internal/clitest"
	"github.com/dlbundle/dlbundle/internal/slowfs"
)

// The package's tests share one cluster (start-up is the slow part) whose
// Shared directory is a slowfs mount, so that they can count what the jobs
// do on the "parallel file system". tools holds what is installed on every
// node but not on the shared file system: dlbundle and the Slurm scripts.
var (
	shared *Cluster
	sfs    *slowfs.FS
	tools  string
	dlb    string // the dlbundle binary
)

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	if err := Check(); err != nil {
		return 0, err
	}
	var err error
	// Not under /tmp: every fake node has its own /tmp.
	tools, err = os.MkdirTemp("/var/tmp", "dlbundle-cluster-tools-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(tools)
	os.Chmod(tools, 0o755)
	// A copy in tools: the CLI's own place is under this /tmp.
	built, err := clitest.Build("")
	if err != nil {
		return 0, err
	}
	dlb = filepath.Join(tools, "dlbundle")
	if out, err := exec.Command("cp", built, dlb).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("cp %s %s: %v\n%s", built, dlb, err, out)
	}
	opt, err := jobScripts()
	if err != nil {
		return 0, err
	}
	opt.Nodes = 3
	if conf, err := spankPlugin(); err != nil {
		return 0, err
	} else if conf != "" {
		opt.Conf = append(opt.Conf, "PlugStackConfig="+conf)
	}
	opt.MountShared = func(src, mnt string) (func() error, error) {
		if err := os.Mkdir(mnt, 0o755); err != nil && !os.IsExist(err) {
			return nil, err
		}
		f, err := slowfs.Mount(src, mnt, slowfs.Costs{})
		if err != nil {
			return nil, err
		}
		f.RecordPaths(true)
		sfs = f
		return f.Unmount, nil
	}
	shared, err = Start(opt)
	if err != nil {
		return 0, err
	}
	defer shared.Stop()
	return m.Run(), nil
}

// jobScripts configures the examples/jobs Prolog, Epilog and TaskProlog, run
// unchanged: slurmd runs them with an empty environment, so a site's wrapper
// (here: one line) says where dlbundle is installed.
func jobScripts() (Options, error) {
	var opt Options
	for _, s := range []struct {
		field *string
		name  string
	}{{&opt.Prolog, "prolog.sh"}, {&opt.Epilog, "epilog.sh"}, {&opt.TaskProlog, "taskprolog.sh"}} {
		// slurmd runs the script inside its node, whose /tmp is private: a
		// checkout under /tmp is not there. The script goes to the tools
		// directory (/var/tmp) byte for byte.
		text, err := os.ReadFile(filepath.Join("..", "..", "examples", "jobs", s.name))
		if err != nil {
			return opt, err
		}
		script := filepath.Join(tools, "example-"+s.name)
		if err := os.WriteFile(script, text, 0o755); err != nil {
			return opt, err
		}
		wrapper := filepath.Join(tools, s.name)
		body := fmt.Sprintf("#!/bin/sh\nDLBUNDLE=%s exec %s \"$@\"\n", dlb, script)
		if err := os.WriteFile(wrapper, []byte(body), 0o755); err != nil {
			return opt, err
		}
		*s.field = wrapper
	}
	return opt, nil
}

// TestFakeNodesHavePrivateShm: srun reaches every node, and a file written to
// /dev/shm by a task on one node is invisible on the others.
func TestFakeNodesHavePrivateShm(t *testing.T) {
	c := shared
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

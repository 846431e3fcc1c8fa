package node

import (
	"os"
	"os/user"
	"strconv"
	"testing"
)

// TestExpandStageDir: --stage-dir /dev/shm/x-%n used to create a literal %n.
func TestExpandStageDir(t *testing.T) {
	host, _ := os.Hostname()
	name := strconv.Itoa(os.Getuid())
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	env := envOf("SLURM_JOB_ID", "42", "SLURMD_NODENAME", "node7", "TMPDIR", "/local/job42")
	for in, want := range map[string]string{
		"/dev/shm/x-%n":   "/dev/shm/x-node7",
		"/dev/shm/%u/%j":  "/dev/shm/" + name + "/42",
		"/dev/shm/dlb-%U": "/dev/shm/dlb-" + strconv.Itoa(os.Getuid()),
		"%t/dlbundle":     "/local/job42/dlbundle",
		"/x/%h":           "/x/" + host,
		"/x/100%%":        "/x/100%",
		"/x/%q%":          "/x/%q%",
		"/no/pattern":     "/no/pattern",
	} {
		if got := ExpandStageDir(in, env); got != want {
			t.Errorf("ExpandStageDir(%q) = %q, want %q", in, got, want)
		}
	}
	if got := ExpandStageDir("/s/%j/%n/%j", envOf("SLURM_JOB_ID", "..", "SLURMD_NODENAME", "../a/b")); got != "/s/_/.._a_b/_" {
		t.Errorf("environment values escaped their component: %q", got)
	}
	if got := ExpandStageDir("/s/%j", envOf()); got != "/s/nojob" {
		t.Errorf("outside a job: %q", got)
	}
	t.Setenv(StageDirEnv, "/dev/shm/t-%j")
	t.Setenv("SLURM_JOB_ID", "9")
	if got := ResolveStageDir(""); got != "/dev/shm/t-9" {
		t.Errorf("ResolveStageDir expands the environment's pattern: %q", got)
	}
	if got := ResolveStageDir("/flag/%j"); got != "/flag/9" {
		t.Errorf("ResolveStageDir expands the flag's pattern: %q", got)
	}
}

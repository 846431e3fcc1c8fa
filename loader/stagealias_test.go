package loader

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func itoa(i int) string { return strconv.Itoa(i) }

func envOf(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestStageAliasKeys(t *testing.T) {
	img := filepath.Join(t.TempDir(), "app.dlimg")
	if err := os.WriteFile(img, []byte("v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	key := func(ref string, env func(string) string) string {
		k, err := StageAlias(ref, env)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	job1 := key(img, envOf("SLURM_JOB_ID", "1"))
	if job1 == key(img, envOf("SLURM_JOB_ID", "2")) {
		t.Error("two jobs share an alias: a rebuilt image would be served stale to the next job")
	}
	if job1 == key(img, envOf("SLURM_JOB_ID", "1", "SLURM_STEP_ID", "1")) ||
		key(img, envOf("SLURM_JOB_ID", "1", "SLURM_STEP_ID", "0")) == key(img, envOf("SLURM_JOB_ID", "1", "SLURM_STEP_ID", "1")) {
		t.Error("two job steps share an alias: an image rebuilt between two sruns would be served stale")
	}
	if job1 != key(img, envOf("SLURM_JOB_ID", "1", "PBS_JOBID", "9")) {
		t.Error("alias depends on a job id variable of lower preference")
	}
	if job1 == key("/other/app.dlimg", envOf("SLURM_JOB_ID", "1")) {
		t.Error("two images share an alias")
	}
	// Within a job the image is not even stat'ed: a missing path still has a key.
	if _, err := StageAlias("/no/such/image", envOf("FLUX_JOB_ID", "f1")); err != nil {
		t.Errorf("alias inside a job touched the image: %v", err)
	}
	// Outside a job the key follows the file's identity.
	before := key(img, envOf())
	if before != key(img, envOf()) {
		t.Error("alias outside a job is not stable")
	}
	if err := os.Chtimes(img, time.Now(), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if before == key(img, envOf()) {
		t.Error("an image rebuilt at the same path keeps its alias outside a job")
	}
	if _, err := StageAlias("/no/such/image", envOf()); err == nil {
		t.Error("alias of a missing image outside a job: want the stat error")
	}
	// oci:// tags outside a job are resolved every time; pinned digests are keys.
	if k := key("oci://reg/app:v1", envOf()); k != "" {
		t.Errorf("unpinned oci tag outside a job got alias %q; want none", k)
	}
	if k := key("oci://reg/app@sha256:"+strings.Repeat("0", 64), envOf()); k == "" {
		t.Error("pinned oci ref got no alias")
	}
}

// The rank that stages reads the image; every later rank on the node finds
// the stage through the alias with no system call on the image path at all.
// strace -P lists exactly the system calls that touch a path.
func TestStageLaterRanksDoNotTouchImage(t *testing.T) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Fatalf("strace is needed (make deps installs it): %v", err)
	}
	h := newHelperSetup(t, 4, 0)
	traced := func(name string) string {
		log := filepath.Join(filepath.Dir(h.image), name)
		helper := h.command()
		cmd := exec.Command(strace, append([]string{"-f", "-qq", "-e", "signal=none", "-P", h.image, "-o", log}, helper.Args...)...)
		cmd.Env = helper.Env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", name, err, out)
		}
		b, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	first := traced("first.strace")
	if !strings.Contains(first, h.image) {
		t.Fatalf("the staging rank's trace shows no access to the image; the check cannot work:\n%s", first)
	}
	if second := traced("second.strace"); second != "" {
		t.Fatalf("a later rank touched the image on the shared file system:\n%s", second)
	}
	if n := h.materializeRuns(t); n != 1 {
		t.Fatalf("%d materialize runs; want 1", n)
	}
}

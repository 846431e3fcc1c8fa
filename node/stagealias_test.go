package node

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
	if step0 := envOf("SLURM_JOB_ID", "1", "SLURM_STEP_ID", "0"); key(img, step0) == key("/other/app.dlimg", step0) {
		t.Error("two images share an alias")
	}
	// Within a launch the image is not even stat'ed: a missing path still has a key.
	for _, env := range [][]string{{"FLUX_JOB_ID", "f1", "FLUX_TASK_RANK", "3"}, {"SLURM_JOB_ID", "1", "SLURM_STEP_ID", "0"},
		{"SLURM_JOB_ID", "1", "PMIX_NAMESPACE", "ns1"}, {"PBS_JOBID", "7", "PMI_RANK", "1"}} {
		if _, err := StageAlias("/no/such/image", envOf(env...)); err != nil {
			t.Errorf("alias inside a launch (%v) touched the image: %v", env, err)
		}
	}
	// A batch script or an salloc shell calling exec directly (a job, no
	// step, no launcher, no rank): the key follows the file, so an image
	// rebuilt at the same path within the job is never served stale.
	serial := envOf("SLURM_JOB_ID", "1", "SLURM_PROCID", "0")
	if _, err := StageAlias("/no/such/image", serial); err == nil {
		t.Error("alias of a missing image in a batch script: want the stat error")
	}
	inJob := key(img, serial)
	if err := os.WriteFile(img, []byte("v2, rebuilt"), 0o644); err != nil {
		t.Fatal(err)
	}
	if inJob == key(img, serial) {
		t.Error("an image rebuilt at the same path keeps its alias in a batch script")
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

// TestJobIDNearestLauncher: every launch inside one allocation gets its own
// id. mpirun's ranks inside an sbatch script inherit the batch step's
// SLURM_JOB_ID without SLURM_STEP_ID; two mpiruns in one script used to share
// the key, so the second ran the stage of an image rebuilt in between.
func TestJobIDNearestLauncher(t *testing.T) {
	batch := []string{"SLURM_JOB_ID", "12", "SLURM_PROCID", "0"}
	mpirun1 := envOf(append(batch, "OMPI_MCA_ess_base_jobid", "3811049473", "PMIX_NAMESPACE", "3811049473")...)
	mpirun2 := envOf(append(batch, "OMPI_MCA_ess_base_jobid", "3811049474", "PMIX_NAMESPACE", "3811049474")...)
	id1, src1 := JobID(mpirun1)
	id2, _ := JobID(mpirun2)
	if id1 == id2 {
		t.Fatalf("two mpirun launches in one batch job share the id %q", id1)
	}
	if src1 != "PMIX_NAMESPACE+SLURM_JOB_ID" || id1 != "3811049473/12" {
		t.Errorf("id %q from %q", id1, src1)
	}
	// srun --mpi=pmix: the PMIx namespace names the step; steps differ.
	s0, _ := JobID(envOf("SLURM_JOB_ID", "12", "SLURM_STEP_ID", "0", "PMIX_NAMESPACE", "slurm.pmix.12.0"))
	s1, _ := JobID(envOf("SLURM_JOB_ID", "12", "SLURM_STEP_ID", "1", "PMIX_NAMESPACE", "slurm.pmix.12.1"))
	if s0 == s1 {
		t.Error("two srun steps share an id")
	}
	// Open MPI without PMIx in the environment still gets its own id.
	o1, _ := JobID(envOf("SLURM_JOB_ID", "12", "OMPI_MCA_ess_base_jobid", "1"))
	o2, _ := JobID(envOf("SLURM_JOB_ID", "12", "OMPI_MCA_ess_base_jobid", "2"))
	if o1 == o2 {
		t.Error("two Open MPI launches share an id")
	}
	if k1, _ := StageAlias("/no/such/app.dlimg", mpirun1); k1 == "" || k1 == func() string { k, _ := StageAlias("/no/such/app.dlimg", mpirun2); return k }() {
		t.Error("two mpirun launches in one batch job share the stage alias")
	}
	if id, src := JobID(envOf("OMPI_COMM_WORLD_RANK", "1")); id != "" || src != "" {
		t.Errorf("a rank variable alone is no job: %q %q", id, src)
	}
}

// TestAliasJobPrefix: aliases written inside a job start with its batch id,
// made safe for a file name, so that gc --job can find them.
func TestAliasJobPrefix(t *testing.T) {
	k, err := StageAlias("/no/such/app.dlimg", envOf("SLURM_JOB_ID", "42", "SLURM_STEP_ID", "3"))
	if err != nil || !strings.HasPrefix(k, "job-42.") || len(k) != len("job-42.")+64 {
		t.Fatalf("alias %q, %v", k, err)
	}
	for in, want := range map[string]string{
		"123.pbs-server": "job-123.pbs-server.",
		"../../etc":      "job-.._.._etc.",
		"a/b c":          "job-a_b_c.",
	} {
		if got := AliasJobPrefix(in); got != want {
			t.Errorf("AliasJobPrefix(%q) = %q, want %q", in, got, want)
		}
	}
	if p := AliasJobPrefix(strings.Repeat("9", 500)); len(p) != len("job-.")+64 {
		t.Errorf("prefix not bounded: %d bytes", len(p))
	}
	img := filepath.Join(t.TempDir(), "app.dlimg")
	os.WriteFile(img, []byte("x"), 0o644)
	if k, _ := StageAlias(img, envOf()); strings.Contains(k, "job-") || len(k) != 64 {
		t.Errorf("alias outside a job %q", k)
	}
}

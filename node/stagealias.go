package node

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/internal/abspath"
)

// launchIDVars name ONE launch of an MPI launcher (every rank of one mpirun
// or prterun shares it, the next launch gets another), nearest the process
// first. Inside a batch job they are what tells two launches apart: mpirun's
// ranks inherit SLURM_JOB_ID of the batch step, which has no SLURM_STEP_ID.
var launchIDVars = []string{
	"PMIX_NAMESPACE",          // any PMIx launcher: Open MPI 4/5, prterun, srun --mpi=pmix
	"OMPI_MCA_ess_base_jobid", // Open MPI's mpirun without PMIx in the environment
}

// batchIDVars are the environment variables through which batch systems give
// every rank of a job the same job id, in order of preference.
var batchIDVars = []string{
	"SLURM_JOB_ID", // Slurm (with SLURM_STEP_ID: every srun is a step)
	"PBS_JOBID",    // PBS Pro, Torque
	"FLUX_JOB_ID",  // Flux
	"LSB_JOBID",    // IBM LSF
	"COBALT_JOBID", // Cobalt
}

// JobID returns the id of this launch and the variables it came from, or
// "", "" outside a job. It is made of the launch id of the launcher nearest
// the process (PMIx namespace or Open MPI job id, if any) and the batch job
// id; under Slurm the job step is part of it. So every launch inside an
// allocation (each srun step, each mpirun in the batch script) gets its own
// id: a job script may rebuild the image between two launches, and each then
// reads the image once per node again (reusing the stage if it is unchanged).
// All ranks of one launch on one node share these variables, because they
// share the launcher daemon that started them.
func JobID(getenv func(string) string) (id, source string) {
	var ids, sources []string
	add := func(vars []string, step bool) {
		for _, v := range vars {
			val := getenv(v)
			if val == "" {
				continue
			}
			if step && v == "SLURM_JOB_ID" {
				if s := getenv("SLURM_STEP_ID"); s != "" {
					val += "." + s
				}
			}
			ids, sources = append(ids, val), append(sources, v)
			return
		}
	}
	add(launchIDVars, false)
	add(batchIDVars, true)
	return strings.Join(ids, "/"), strings.Join(sources, "+")
}

// BatchJobID is the batch system's job id without step or launch (the
// allocation, as an epilog sees it), or "".
func BatchJobID(getenv func(string) string) string {
	for _, v := range batchIDVars {
		if val := getenv(v); val != "" {
			return val
		}
	}
	return ""
}

// rankVars are set in each rank of a parallel launch (not in a batch script
// or an allocation's shell, where exec runs as one process).
var rankVars = []string{"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "FLUX_TASK_RANK"}

// serialInJob reports whether this exec runs inside a batch job but outside
// any parallel launch: a batch script or an salloc shell calling exec
// directly (SLURM_JOB_ID without SLURM_STEP_ID, no launcher's id, no rank).
// Nothing tells two such execs apart, and the image may be rebuilt between
// them; they are single processes, so one stat of the image each costs no
// rank anything.
func serialInJob(getenv func(string) string) bool {
	for _, vars := range [][]string{launchIDVars, rankVars} {
		for _, v := range vars {
			if getenv(v) != "" {
				return false
			}
		}
	}
	return getenv("SLURM_STEP_ID") == ""
}

// StageAlias names an image for the stage's by-path index without reading it,
// so that every rank after the first on a node finds the stage with no
// operation on the shared file system — not even a stat of the image.
//
// ref is the image as given on the command line (a file path, made absolute,
// or an oci:// reference). Within one launch of a job (a job step, an mpirun)
// the file at that path is assumed not to change, so the key is sha256(ref,
// job id). A batch script or an allocation's shell calling exec directly is
// no launch (serialInJob): its key also holds the file's identity, as
// outside a job, so that an image rebuilt between two such execs is staged
// anew. Outside a batch job there is
// no job id; then the key includes the image's device, inode, mtime and size
// from ONE stat (a cheap metadata operation, once per rank), so that an image
// rebuilt at the same path is never served from an old stage. An oci:// ref
// pinned by @sha256: digest needs neither; an
// oci:// tag outside a job gets no alias (""): a tag may move, so it is
// resolved every time.
func StageAlias(ref string, getenv func(string) string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "dlbundle-stage-alias-v1\x00%s\x00", ref)
	id, source := JobID(getenv)
	if id != "" {
		fmt.Fprintf(h, "job\x00%s=%s", source, id)
	}
	if id == "" && isOCIRef(ref) && !isPinnedRef(ref) {
		return "", nil // a tag may move between runs: resolve it every time
	} else if !isOCIRef(ref) && (id == "" || serialInJob(getenv)) {
		var st unix.Stat_t
		if err := unix.Stat(ref, &st); err != nil {
			return "", &os.PathError{Op: "stat", Path: ref, Err: err}
		}
		fmt.Fprintf(h, "file\x00%d\x00%d\x00%d.%d\x00%d", st.Dev, st.Ino, st.Mtim.Sec, st.Mtim.Nsec, st.Size)
	}
	key := hex.EncodeToString(h.Sum(nil))
	if job := BatchJobID(getenv); job != "" {
		key = AliasJobPrefix(job) + key
	}
	return key, nil
}

// AliasJobPrefix starts the alias names written inside batch job id, so that
// an epilog can remove the aliases of a finished job (dlbundle gc --job ID)
// without knowing which images it ran. The id comes from the environment:
// only [A-Za-z0-9._-] is kept (no '/' can escape by-path/), and its length
// is bounded.
func AliasJobPrefix(id string) string {
	b := []byte(id)
	if len(b) > 64 {
		b = b[:64]
	}
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	return "job-" + string(b) + "."
}

func isOCIRef(ref string) bool { return strings.HasPrefix(ref, "oci://") }

// isPinnedRef reports whether ref names immutable content (oci://...@sha256:...).
func isPinnedRef(ref string) bool { return isOCIRef(ref) && strings.Contains(ref, "@sha256:") }

// AbsImageRef makes a file path absolute (the same image reached from
// different working directories gets one alias); oci:// refs pass unchanged.
func AbsImageRef(ref string) (string, error) {
	if isOCIRef(ref) {
		return ref, nil
	}
	return abspath.Abs(ref)
}

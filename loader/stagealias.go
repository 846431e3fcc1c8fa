package loader

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// jobIDVars are the environment variables through which batch systems and MPI
// launchers give every rank of a job the same job id, in order of preference.
var jobIDVars = []string{
	"SLURM_JOB_ID",            // Slurm
	"PBS_JOBID",               // PBS Pro, Torque
	"FLUX_JOB_ID",             // Flux
	"LSB_JOBID",               // IBM LSF
	"COBALT_JOBID",            // Cobalt
	"OMPI_MCA_ess_base_jobid", // Open MPI's mpirun (outside a batch system)
	"PMIX_NAMESPACE",          // any PMIx launcher (prterun, Open MPI 5)
}

// JobID returns the batch job id of this process and the variable it came
// from, or "", "" outside a job. Under Slurm the job step is part of it: a
// job script may rebuild the image between two sruns, and each step then
// reads the image once per node again (reusing the stage if it is unchanged).
func JobID(getenv func(string) string) (id, source string) {
	for _, v := range jobIDVars {
		if id := getenv(v); id != "" {
			if v == "SLURM_JOB_ID" {
				if step := getenv("SLURM_STEP_ID"); step != "" {
					id += "." + step
				}
			}
			return id, v
		}
	}
	return "", ""
}

// StageAlias names an image for the stage's by-path index without reading it,
// so that every rank after the first on a node finds the stage with no
// operation on the shared file system — not even a stat of the image.
//
// ref is the image as given on the command line (a file path, made absolute,
// or an oci:// reference). Within one job the file at that path is assumed not
// to change, so the key is sha256(ref, job id). Outside a batch job there is
// no job id; then the key includes the image's device, inode, mtime and size
// from ONE stat (a cheap metadata operation, once per rank), so that an image
// rebuilt at the same path is never served from an old stage. An oci:// ref
// pinned by @sha256: digest needs neither; an
// oci:// tag outside a job gets no alias (""): a tag may move, so it is
// resolved every time.
func StageAlias(ref string, getenv func(string) string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "dlbundle-stage-alias-v1\x00%s\x00", ref)
	if id, source := JobID(getenv); id != "" {
		fmt.Fprintf(h, "job\x00%s=%s", source, id)
	} else if isOCIRef(ref) && !isPinnedRef(ref) {
		return "", nil // a tag may move between runs: resolve it every time
	} else if !isPinnedRef(ref) {
		var st unix.Stat_t
		if err := unix.Stat(ref, &st); err != nil {
			return "", &os.PathError{Op: "stat", Path: ref, Err: err}
		}
		fmt.Fprintf(h, "file\x00%d\x00%d\x00%d.%d\x00%d", st.Dev, st.Ino, st.Mtim.Sec, st.Mtim.Nsec, st.Size)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
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
	return AbsPath(ref)
}

// AbsPath is filepath.Abs without a file-system lookup: os.Getwd stats $PWD
// and "." (the job's working directory, usually on the shared file system),
// getcwd(2) asks the kernel only.
func AbsPath(p string) (string, error) {
	if filepath.IsAbs(p) {
		return filepath.Clean(p), nil
	}
	wd, err := unix.Getwd()
	if err != nil {
		return "", err
	}
	return filepath.Join(wd, p), nil
}

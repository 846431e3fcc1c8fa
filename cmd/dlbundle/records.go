package main

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dlbundle/dlbundle/internal/trustpath"
	"golang.org/x/sys/unix"
)

// The node's records: without --report, every process an exec starts
// that passed something to the file system (a process the image served
// entirely has nothing to add, and writes nothing) appends its report
// line to
// <stage dir>/records/<run>.report, node-local and the user's own, so that
// `dlbundle report` (no file) and an Epilog can tell what the image lacked
// without anyone having planned for it.
const (
	recordsDirName = "records"
	// envRun names the run (one exec launch: a job step, an mpirun): the
	// shim starts each report line with it, and the node's record file is
	// named after it.
	envRun = "DLBUNDLE_RUN"
	// envReportMax bounds a record file: the shim appends no line to a
	// file that has reached it.
	envReportMax = "DLBUNDLE_REPORT_MAX"
	// envRecordMax replaces maxRecordBytes.
	envRecordMax = "DLBUNDLE_RECORD_MAX"
	// envRecord=0 turns the node's records off.
	envRecord = "DLBUNDLE_RECORD"
	// maxRecordFiles and maxRecordBytes bound the records: the oldest runs'
	// files are removed when a new run starts beyond maxRecordFiles, and a
	// run's file that has grown past maxRecordBytes gets no more lines.
	maxRecordFiles = 64
	maxRecordBytes = 16 << 20
)

// runID names this launch: the batch job (with the Slurm step), then the
// MPI launch nearest the process (all ranks of one mpirun share it), so
// that an Epilog finds every run of its job by the prefix "slurm-<job>.":
// slurm-77.3 (an srun step), slurm-77.ompi-1243414529 (an mpirun in the
// batch script), slurm-77 (the script calling exec directly). Outside a
// job and a launch: exec-<hash of the image path and the command>, so that
// a loop of lone execs of one command adds to one record instead of
// evicting a job's (records are bounded in number, maxRecordFiles). An id
// inherited from an outer exec is kept.
func runID(getenv func(string) string, image string, argv []string) string {
	if id := getenv(envRun); id != "" && cleanRunID(id) == id {
		return id
	}
	var parts []string
	for _, b := range []struct{ env, name string }{
		{"SLURM_JOB_ID", "slurm"}, {"PBS_JOBID", "pbs"}, {"FLUX_JOB_ID", "flux"}, {"LSB_JOBID", "lsf"},
	} {
		if id := getenv(b.env); id != "" {
			if b.env == "SLURM_JOB_ID" && getenv("SLURM_STEP_ID") != "" {
				id += "." + getenv("SLURM_STEP_ID")
			}
			parts = append(parts, b.name+"-"+id)
			break
		}
	}
	for _, l := range []struct{ env, name string }{{"OMPI_MCA_ess_base_jobid", "ompi"}, {"PMIX_NAMESPACE", "pmix"}} {
		if id := getenv(l.env); id != "" {
			parts = append(parts, l.name+"-"+id)
			break
		}
	}
	if len(parts) == 0 {
		h := sha256.New()
		h.Write([]byte(absImage(image)))
		for _, a := range argv {
			h.Write([]byte{0})
			h.Write([]byte(a))
		}
		parts = append(parts, fmt.Sprintf("exec-%x", h.Sum(nil)[:8]))
	}
	return cleanRunID(strings.Join(parts, "."))
}

// cleanRunID keeps what the shim accepts ([A-Za-z0-9._:-], at most 64
// bytes): FLUX_JOB_ID's first character is not ASCII.
func cleanRunID(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == ':') {
			b[i] = '_'
		}
	}
	if len(b) > 64 {
		b = b[:64]
	}
	return string(b)
}

// reportTarget is the report file the app's processes append to: --report's
// when given, else the node's record of this run beside the stage (""
// when records are off or the records directory is not the user's own).
// It exports DLBUNDLE_RUN for the shim and the app's children.
// image is exec's image argument, noted beside a new run's record so that
// `dlbundle report` can print a build --from that works as printed.
func reportTarget(report, stage, image string, argv []string) string {
	run := runID(os.Getenv, image, argv)
	os.Setenv(envRun, run)
	os.Unsetenv(envReportMax) // --report: no bound (an outer exec's records: its own)
	if report != "" || os.Getenv(envRecord) == "0" {
		return report
	}
	rd, err := openRecordsDir(filepath.Dir(stage))
	if err != nil {
		return ""
	}
	defer rd.Close()
	p, created, err := nodeRecord(rd, run)
	if err != nil {
		return ""
	}
	os.Setenv(envReportMax, strconv.FormatInt(recordMax(), 10)) // the shim stops appending there
	if created {
		writeOwnFile(rd, run+".image", absImage(image)+"\n")
	}
	return p
}

// absImage is exec's image argument as the records note it: absolute,
// unless a URL.
func absImage(image string) string {
	if !strings.Contains(image, "://") {
		if abs, err := filepath.Abs(image); err == nil {
			return abs
		}
	}
	return image
}

// writeOwnFile creates name in the records dir rd (never through a
// symlink, never over a file) with content; errors are ignored: a note,
// not a record.
func writeOwnFile(rd *trustpath.Dir, name, content string) {
	fd, err := unix.Openat(rd.FD, rd.Name(name), unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return
	}
	unix.Write(fd, []byte(content))
	unix.Close(fd)
}

// recordsDir is where a stage directory keeps its records.
func recordsDir(stageDir string) string { return filepath.Join(stageDir, recordsDirName) }

// openRecordsDir walks to the stage directory by the Private rule (as
// staging checked it) and makes (0700) and enters its records/, which must
// be a directory of the user's own that no one else may write: every file
// of the records is then made, listed and removed by descriptor in it.
func openRecordsDir(stageDir string) (*trustpath.Dir, error) {
	euid := uint32(os.Geteuid())
	sd, err := (&trustpath.Walker{Rule: trustpath.Private, Uid: euid}).WalkDir(stageDir)
	if err != nil {
		return nil, err
	}
	defer sd.Close()
	dir := sd.Join(recordsDirName)
	rd, err := sd.Enter(dir, recordsDirName, 0o700)
	if err != nil {
		return nil, err
	}
	if rd.Node.Uid != euid || rd.Node.Mode&0o022 != 0 {
		rd.Close()
		return nil, fmt.Errorf("%s is not a directory of your own", dir)
	}
	return rd, nil
}

// nodeRecord opens (creating) the record file of run in the records dir
// rd; a new run prunes the oldest files.
func nodeRecord(rd *trustpath.Dir, run string) (p string, created bool, err error) {
	name := run + ".report"
	p = rd.Join(name)
	fd, err := unix.Openat(rd.FD, rd.Name(name), unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err == nil {
		unix.Close(fd)
		pruneRecords(rd, name)
		return p, true, nil
	}
	if !errors.Is(err, unix.EEXIST) {
		return "", false, err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(rd.FD, rd.Name(name), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size >= recordMax() {
		return "", false, fmt.Errorf("%s is full or not a regular file", p)
	}
	return p, false, nil
}

// recordMax is the bound of one run's record file: DLBUNDLE_RECORD_MAX
// (bytes; a site's choice) or maxRecordBytes.
func recordMax() int64 {
	if n, err := strconv.ParseInt(os.Getenv(envRecordMax), 10, 64); err == nil && n > 0 {
		return n
	}
	return maxRecordBytes
}

// pruneRecords removes the oldest record files of the records dir rd
// beyond maxRecordFiles, never keep (the run just started), by descriptor.
func pruneRecords(rd *trustpath.Dir, keep string) {
	fd, err := unix.Openat(rd.FD, rd.Name("."), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	df := os.NewFile(uintptr(fd), rd.Path)
	ents, err := df.ReadDir(-1)
	df.Close()
	if err != nil || len(ents) <= maxRecordFiles {
		return
	}
	type rec struct {
		name string
		mt   time.Time
	}
	var rs []rec
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".report") || !e.Type().IsRegular() {
			continue
		}
		if info, err := e.Info(); err == nil {
			rs = append(rs, rec{e.Name(), info.ModTime()})
		}
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].mt.Before(rs[j].mt) })
	for i := 0; i < len(rs)-maxRecordFiles; i++ {
		if rs[i].name != keep {
			unix.Unlinkat(rd.FD, rd.Name(rs[i].name), 0)
			unix.Unlinkat(rd.FD, rd.Name(strings.TrimSuffix(rs[i].name, ".report")+".image"), 0)
		}
	}
}

// recordSet is a records dir the trust rule accepted, held by descriptor:
// its files are opened in it (openRecord), never by a path again.
type recordSet struct {
	dir   *trustpath.Dir
	files []string // paths, oldest first
}

// nodeRecords lists the record files of a stage directory, oldest first.
// The stage dir was resolved and checked as staging does (report.go); the
// records dir must be the caller's own and writable by no one else (as
// nodeRecord makes it): one that is not is skipped with a warning naming it,
// since whoever could write it chose what the records say, the fold advice
// included.
func nodeRecords(stageDir string) (*recordSet, error) {
	dir := recordsDir(stageDir)
	euid := uint32(os.Geteuid())
	d, err := (&trustpath.Walker{Rule: trustpath.Private, Uid: euid}).WalkDir(dir)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("no records in %s: no app ran here with 'dlbundle exec' (or DLBUNDLE_RECORD=0 was set); give report files, or --stage-dir where exec staged", stageDir)
		}
		fmt.Fprintf(os.Stderr, "dlbundle report: warning: skipped the records in %s: %v\n", dir, err)
		return nil, fmt.Errorf("no records in %s that are trusted: give report files, or --stage-dir where exec staged", stageDir)
	}
	if d.Node.Uid != euid || d.Node.Mode&0o022 != 0 {
		fmt.Fprintf(os.Stderr, "dlbundle report: warning: skipped the records in %s: owned by uid %d with mode %#o, not a directory of your own that only you can write (uid %d)\n",
			d.Path, d.Node.Uid, d.Node.Mode&0o7777, euid)
		d.Close()
		return nil, fmt.Errorf("no records in %s that are trusted: give report files, or --stage-dir where exec staged", stageDir)
	}
	// d.FD is O_PATH: list through a descriptor opened in it.
	fd, err := unix.Openat(d.FD, d.Name("."), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		d.Close()
		return nil, &os.PathError{Op: "open", Path: d.Path, Err: err}
	}
	df := os.NewFile(uintptr(fd), d.Path)
	ents, err := df.ReadDir(-1)
	df.Close()
	if err != nil {
		d.Close()
		return nil, err
	}
	type rec struct {
		path string
		mt   int64
	}
	var rs []rec
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".report") || !e.Type().IsRegular() {
			continue
		}
		if info, err := e.Info(); err == nil && info.Size() > 0 {
			rs = append(rs, rec{d.Join(e.Name()), info.ModTime().UnixNano()})
		}
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].mt < rs[j].mt })
	var out []string
	for _, r := range rs {
		out = append(out, r.path)
	}
	if len(out) == 0 {
		d.Close()
		return nil, fmt.Errorf("no records in %s yet: processes write theirs when they end, and only those that passed something to the file system (a run the image served entirely leaves none)", d.Path)
	}
	return &recordSet{dir: d, files: out}, nil
}

// open opens the file p (a record, or a note beside one) in the held
// records dir: a regular file of the caller's own (never a FIFO or a
// device, never through a link), else an error naming it.
func (rs *recordSet) open(p string) (*os.File, error) {
	name := filepath.Base(p)
	if filepath.Join(rs.dir.Path, name) != p {
		return nil, fmt.Errorf("%s is not in the records dir %s", p, rs.dir.Path)
	}
	f, _, err := rs.dir.OpenOwn(p, name)
	return f, err
}

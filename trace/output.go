package trace

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/internal/outfile"
	"github.com/dlbundle/dlbundle/internal/version"
)

// DefaultOutput is where a trace goes without -o.
const DefaultOutput = "dlbundle.trace"

// rankVars are the launcher variables that carry this process's rank, the
// launcher nearest the process first: an MPI launcher started inside a batch
// step (mpirun in an sbatch script) passes its ranks the batch step's
// SLURM_PROCID (0 for all of them) along with their own rank.
var rankVars = []string{"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "FLUX_TASK_RANK", "SLURM_PROCID"}

// LauncherRank returns the rank set by a parallel launcher, or "".
func LauncherRank(getenv func(string) string) string {
	for _, v := range rankVars {
		if r := getenv(v); r != "" {
			return r
		}
	}
	return ""
}

// OutputPath is the trace file name: out (or the default), with ".RANK"
// appended under a launcher so that ranks never write the same file.
func OutputPath(out, rank string) string {
	if out == "" {
		out = DefaultOutput
	}
	if rank != "" {
		out += "." + rank
	}
	return out
}

// outputFile is written under a temporary name next to the final one and
// renamed when the trace is complete, so a previous trace is only replaced
// by a complete one; a device or FIFO (-o /dev/null) is written to
// directly, never replaced (package outfile). A trace lists argv, the
// working directory and every path the app looked up: it is private, mode
// 0600 less the umask.
type outputFile struct {
	f   *os.File
	out *outfile.File
}

func createOutput(path string) (*outputFile, error) {
	out, err := outfile.Create(path, "trace", "-o")
	if err != nil {
		return nil, err
	}
	return &outputFile{f: out.File, out: out}, nil
}

// commit closes the file and gives it its final name.
func (o *outputFile) commit() error { return o.out.Commit(outfile.Private()) }

func (o *outputFile) discard() { o.out.Discard() }

// envRecorded are the variables the header keeps (those that steer lookups).
var envRecorded = []string{"PATH", "LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "PYTHONHOME"}

func newHeader(command []string, rank string, start time.Time) Header {
	h := Header{Command: command, Rank: rank, Dlbundle: version.Version,
		Start: start.UTC().Format(time.RFC3339Nano), Glibc: glibcVersion()}
	h.Cwd, _ = os.Getwd()
	h.Host, _ = os.Hostname()
	for _, k := range envRecorded {
		if v, ok := os.LookupEnv(k); ok {
			if h.Env == nil {
				h.Env = map[string]string{}
			}
			h.Env[k] = v
		}
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		h.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	return h
}

// glibcVersion is gnu_get_libc_version's answer (dlbundle is static and
// cannot call it): read from ld.so's banner ("... release version 2.36."),
// which glibc builds with the same version as libc.so.6; else asked of
// getconf, which costs a process start (66 page faults, ~3 ms); "" when
// there is no glibc.
func glibcVersion() string {
	if v := bannerVersion(ldso); v != "" {
		return v
	}
	out, err := exec.Command("getconf", "GNU_LIBC_VERSION").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(bytes.TrimPrefix(out, []byte("glibc "))))
}

// bannerVersion finds "release version X.Y" in the file at path and returns
// X.Y, or "". It reads 16 KiB at a time (ld.so is ~200 KiB, the banner near
// its end), keeping a chunk's tail in case the banner spans two.
func bannerVersion(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	marker := []byte("release version ")
	const keep = 64 // marker and version
	buf := make([]byte, 16<<10)
	carry := 0
	for {
		n, err := io.ReadFull(f, buf[carry:])
		data := buf[:carry+n]
		if i := bytes.Index(data, marker); i >= 0 {
			v := data[i+len(marker):]
			end := 0
			for end < len(v) && (v[end] == '.' || v[end] >= '0' && v[end] <= '9') {
				end++
			}
			if end < len(v) || err != nil { // the version ends in this chunk
				return strings.TrimRight(string(v[:end]), ".")
			}
		}
		if err != nil {
			return ""
		}
		carry = copy(buf, data[len(data)-keep:])
	}
}

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/image"
)

// Mode is one way of running a corpus.
type Mode string

const (
	Native Mode = "native"
	Cold   Mode = "cold" // dlbundle exec with a fresh stage dir: this exec stages
	Warm   Mode = "warm" // dlbundle exec again: the stage is found
	// Native2 is a second native run (Corpus.NativeTwice).
	Native2 Mode = "native2"
)

// Run is what one corpus command needs: its argv, environment, working
// directory, and the uid it runs as (0: this process's).
type Run struct {
	Argv []string
	Env  []string
	Dir  string
	UID  int
	// Output is where the command writes its results when not stdout
	// (JUnit XML); "" means stdout is the result.
	Output string
	// MemLimit, if not 0, caps the command's address space (RLIMIT_AS,
	// inherited by its children): a test that asks for more fails with
	// MemoryError the same way natively and under exec, instead of the
	// kernel's OOM killer ending it (or a neighbour's work) on a shared
	// machine (numpy's full suite reached 23 GB of RSS here).
	MemLimit uint64
}

// Runner runs commands natively or through dlbundle exec, with a fixed
// environment.
type Runner struct {
	DLBundle string
	Work     string // scratch: stage dirs, reports, outputs
	Log      io.Writer
}

// baseEnv is the controlled environment every corpus starts from: no
// variable of the caller's (PYTHON*, LD_*, a pyenv PATH) leaks in.
func baseEnv(home, tmp string) []string {
	return []string{"PATH=/usr/bin:/bin", "HOME=" + home, "LANG=C.UTF-8", "LC_ALL=C.UTF-8", "TMPDIR=" + tmp,
		"PYTHONDONTWRITEBYTECODE=1", "PYTHONHASHSEED=0", "TZ=UTC"}
}

// Exec runs r in mode with the image img (stage dir and report file under
// the runner's work dir, by name), returning combined stdout+stderr (the
// result when r.Output is "") and the wall time.
func (rn *Runner) Exec(name string, mode Mode, img string, r Run) (out []byte, elapsed time.Duration, err error) {
	argv := r.Argv
	stage := filepath.Join(rn.Work, name+".stage")
	if r.UID != 0 {
		stage += fmt.Sprintf("-uid%d", r.UID)
	}
	if mode == Cold {
		os.RemoveAll(stage)
		if r.UID != 0 {
			// exec refuses a stage dir another user owns, and this user
			// cannot create one in the work dir (root's).
			os.Mkdir(stage, 0o700)
			os.Chown(stage, r.UID, r.UID)
		}
	}
	if mode == Cold || mode == Warm {
		argv = append([]string{rn.DLBundle, "exec", "--stage-dir", stage, "--report", rn.ReportFile(name, mode, r.UID), img, "--"}, argv...)
		os.Truncate(rn.ReportFile(name, mode, r.UID), 0) // an unprivileged run's file is made for it (prepareUID)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = r.Env
	cmd.Dir = r.Dir
	if r.UID != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(r.UID), Gid: uint32(r.UID)}}
	}
	fmt.Fprintf(rn.Log, "  %s %s: %s\n", name, mode, strings.Join(argv, " "))
	start := time.Now()
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err = cmd.Start(); err == nil {
		if r.MemLimit != 0 {
			// Right after the start: the corpus allocates its large
			// arrays seconds later, in tests.
			lim := unix.Rlimit{Cur: r.MemLimit, Max: r.MemLimit}
			if perr := unix.Prlimit(cmd.Process.Pid, unix.RLIMIT_AS, &lim, nil); perr != nil {
				cmd.Process.Kill()
				cmd.Wait()
				return nil, 0, fmt.Errorf("prlimit: %v", perr)
			}
		}
		err = cmd.Wait()
	}
	return buf.Bytes(), time.Since(start), err
}

// ReportFile is the --report file of an exec run.
func (rn *Runner) ReportFile(name string, mode Mode, uid int) string {
	return filepath.Join(rn.Work, fmt.Sprintf("%s.%s.uid%d.report", name, mode, uid))
}

// Trace runs the pilot under dlbundle trace and builds the image.
func (rn *Runner) Trace(name string, pilot Run, buildArgs ...string) (img string, err error) {
	tr := filepath.Join(rn.Work, name+".trace")
	img = filepath.Join(rn.Work, name+".dlimg")
	argv := append([]string{rn.DLBundle, "trace", "-q", "-o", tr, "--"}, pilot.Argv...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = pilot.Env, pilot.Dir
	fmt.Fprintf(rn.Log, "  %s pilot: %s\n", name, strings.Join(argv, " "))
	if out, err := cmd.CombinedOutput(); err != nil {
		// A pilot whose corpus reports failures still traced its start-up.
		if _, ok := err.(*exec.ExitError); !ok {
			return "", fmt.Errorf("pilot of %s: %v\n%s", name, err, tail(out))
		}
	}
	args := append(append([]string{"build", "-o", img}, buildArgs...), tr)
	if out, err := exec.Command(rn.DLBundle, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("build of %s: %v\n%s", name, err, tail(out))
	}
	// build writes the image for its owner alone (0600); the unprivileged
	// runs stage it too.
	return img, os.Chmod(img, 0o644)
}

func tail(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 3000 {
		s = "..." + s[len(s)-3000:]
	}
	return s
}

// ShimStats is what the reports of one exec run say about the shim.
type ShimStats struct {
	Processes int // report lines: processes that ended with the shim loaded
	Answered  int // lookups answered from the stage
	Missing   int // answered as known missing
	Passed    int // passed to the file system
	// Fallbacks: passed-through paths that the image decides (bundled,
	// recorded missing, or absent from a bundled listing): the shim should
	// have answered them and did not (a dirty directory, the shim off).
	Fallbacks     int
	FallbackProcs int      // processes with at least one
	Examples      []string // a few of those paths
	// Reasons sums the report's own counts of passed-through lookups by
	// reason, when the shim writes them (fields whose name starts with
	// "fallback" or "dirty").
	Reasons map[string]int
}

// ReadReport totals the report lines of a run against the image.
func ReadReport(file string, decides func(string) bool) (ShimStats, error) {
	st := ShimStats{Reasons: map[string]int{}}
	f, err := os.Open(file)
	if err != nil {
		return st, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	seen := map[string]bool{}
	for sc.Scan() {
		var line map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return st, fmt.Errorf("%s: %v", file, err)
		}
		st.Processes++
		num := func(k string) int {
			var n int
			json.Unmarshal(line[k], &n)
			return n
		}
		st.Answered += num("answered")
		st.Missing += num("missing")
		st.Passed += num("passed")
		for k := range line {
			if strings.HasPrefix(k, "fallback") || strings.HasPrefix(k, "dirty") {
				var n int
				if json.Unmarshal(line[k], &n) == nil {
					st.Reasons[k] += n
				}
			}
		}
		var paths []string
		json.Unmarshal(line["passed_paths"], &paths)
		hit := false
		for _, p := range paths {
			// Longer than PATH_MAX: the kernel refuses it (ENAMETOOLONG)
			// before any lookup.
			if strings.HasPrefix(p, "/") && len(p) < 4096 && decides(path.Clean(p)) {
				st.Fallbacks++
				hit = true
				if !seen[p] && len(st.Examples) < 8 {
					st.Examples = append(st.Examples, p)
				}
				seen[p] = true
			}
		}
		if hit {
			st.FallbackProcs++
		}
	}
	return st, sc.Err()
}

// ImageDecides returns a function saying whether the image decides an
// absolute, clean path: an entry other than external, a name absent from a
// bundled directory's listing, or a path below a bundled regular file.
// "/" itself is left out: every node's own root, stat'ed by glibc
// internals no preload sees.
func ImageDecides(img string) (func(string) bool, int, error) {
	im, err := image.OpenFile(img)
	if err != nil {
		return nil, 0, err
	}
	defer im.Close()
	types := map[string]image.Type{}
	listed := map[string]bool{}
	for _, e := range im.Entries() {
		types[e.Path] = e.Type
		for _, d := range e.Listing {
			listed[path.Join(e.Path, d.Name)] = true
		}
	}
	return func(p string) bool {
		if p == "/" {
			return false
		}
		if ty, ok := types[p]; ok {
			return ty != image.TypeExternal
		}
		for q := p; q != "/"; {
			parent := path.Dir(q)
			switch types[parent] {
			case image.TypeDir:
				return q == p && !listed[q]
			case image.TypeRegular:
				return true
			case image.TypeExternal, image.TypeMissing, image.TypeSymlink:
				return false
			}
			q = parent
		}
		return false
	}, len(types), nil
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	sort.Strings(k)
	return k
}

func goarch() string { return runtime.GOARCH }

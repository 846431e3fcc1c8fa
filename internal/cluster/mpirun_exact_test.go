package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/dlbundle/dlbundle/image"
)

// Open MPI under mpirun, rank by rank: apps that load things
// AFTER MPI_Init — a C app that dlopens a plugin and reads a data file, and
// Python doing `from mpi4py import MPI` then `import numpy` — run in a
// 3-node batch job (4 and 2 ranks per node) natively and through `dlbundle exec`. Open MPI
// 4.1's MPI_Init creates its session directory by mkdir of every component
// from "/" (EEXIST on all but the last) in some of the ranks; a shim that
// treats such a failed write as a change turns itself off there, silently.
//
// The check is strace, one log per rank (-f: the rank and every child): the
// kernel's own record of every file system call the rank made, independent
// of the shim's accounting (a shim that turned itself off would also not
// count what it passed on, so --report alone could not be trusted to show
// it). Every path argument is checked against the image's table of
// contents: a call on a path the image decides (a bundled file, directory
// or symlink, a recorded-missing name, a name absent from a bundled
// directory's listing) is a failure, whatever its result. Each rank must
// also show its app started from the stage (the execve), so an empty log
// cannot pass.

// mpiPluginApp is the C app: MPI_Init, then dlopen of argv[1] and a read
// of argv[2], then a reduction over every rank.
const mpiPluginApp = `#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	int rank, size;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	void *h = dlopen(argv[1], RTLD_NOW);
	if (!h) { fprintf(stderr, "rank %d: dlopen: %s\n", rank, dlerror()); MPI_Abort(MPI_COMM_WORLD, 3); }
	int (*value)(int) = (int (*)(int))dlsym(h, "plugin_value");
	char data[64] = "";
	FILE *f = fopen(argv[2], "r");
	if (!f || !fgets(data, sizeof data, f)) { fprintf(stderr, "rank %d: cannot read %s\n", rank, argv[2]); MPI_Abort(MPI_COMM_WORLD, 4); }
	fclose(f);
	int mine = value(rank), sum = 0;
	MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	Dl_info info;
	dladdr((void *)value, &info);
	const char *node = getenv("SLURMD_NODENAME");
	printf("rank %d of %d on %s: plugin(%d)=%d sum=%d from %s data=%s", rank, size, node ? node : "-", rank, mine, sum, info.dli_fname, data);
	MPI_Finalize();
	return 0;
}
`

const mpiPlugin = `int plugin_value(int r) { return 1000 + r * r; }
`

// mpiPythonApp imports mpi4py (MPI_Init at import), then numpy, and
// prints what every rank computed and where numpy came from.
const mpiPythonApp = `from mpi4py import MPI
import os
import numpy
c = MPI.COMM_WORLD
total = c.allreduce(numpy.arange(4) * (c.rank + 1))
print(f"rank {c.rank} of {c.size} on {os.environ.get('SLURMD_NODENAME')}: numpy {numpy.__version__} "
      f"from {numpy.__file__} sum {total.tolist()} core {os.path.dirname(numpy.core.__file__)}", flush=True)
`

// rankStrace is the wrapper that runs one rank under strace, its log named
// after the rank Open MPI gave it. --seccomp-bpf: the ranks stop only at
// the file calls traced, not at every call; Open MPI's ranks poll while they
// wait for each other, and a stop at every poll made a run on 2 shared cores
// take 10 s to over 5 minutes (load 35 of the test's own processes).
const rankStrace = `#!/bin/sh
exec strace -f --seccomp-bpf -qq -y -e signal=none -e trace=%%file -o "%s/rank.$OMPI_COMM_WORLD_RANK" "$@"
`

// TestMpirunLoadsAfterInitFromStage: the C app with a plugin.
func TestMpirunLoadsAfterInitFromStage(t *testing.T) {
	dir := filepath.Join(shared.Shared, "mpiplug")
	os.RemoveAll(dir)
	for _, d := range []string{"bin", "lib/plugins", "share"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	src := filepath.Join(shared.Dir, "mpiplug-src")
	os.MkdirAll(src, 0o755)
	write(t, filepath.Join(src, "app.c"), mpiPluginApp)
	write(t, filepath.Join(src, "plugin.c"), mpiPlugin)
	write(t, filepath.Join(dir, "share", "data.txt"), "forty-two\n")
	app, plugin := filepath.Join(dir, "bin", "app"), filepath.Join(dir, "lib", "plugins", "libvalue.so")
	compile(t, "mpicc", "-O1", "-o", app, filepath.Join(src, "app.c"), "-ldl")
	compile(t, "gcc", "-O1", "-shared", "-fPIC", "-o", plugin, filepath.Join(src, "plugin.c"))
	mpirunExact(t, "mpiplug", 4, []string{app, plugin, filepath.Join(dir, "share", "data.txt")}, "plugin(", plugin)
}

// TestMpirunMpi4pyThenNumpyFromStage: `from mpi4py import MPI`, then
// `import numpy`.
func TestMpirunMpi4pyThenNumpyFromStage(t *testing.T) {
	if _, err := os.Stat("/usr/lib/python3/dist-packages/mpi4py/MPI.cpython-311-x86_64-linux-gnu.so"); err != nil {
		t.Fatal("Debian's python3-mpi4py is needed (make deps)")
	}
	dir := filepath.Join(shared.Shared, "mpi4py")
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "app.py")
	write(t, script, mpiPythonApp)
	// -I -B: no user site, no PYTHON* variables, no bytecode written.
	// 2 ranks per node: 6 Pythons importing numpy under strace are what two
	// cores shared with the rest of make test can run within the batch
	// wait (12 took 5 minutes at load 17 and timed out); Open MPI's
	// session-dir walk still happens on every node.
	mpirunExact(t, "mpi4py", 2, []string{"/usr/bin/python3", "-I", "-B", script}, "numpy ",
		"/usr/lib/python3/dist-packages/numpy/core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so")
}

// mpirunExact traces a 2-rank pilot of argv under mpirun (one rank on each
// of two nodes), builds the image, runs argv on 3 nodes x perNode ranks natively
// and under `dlbundle exec` (each rank under strace), and wants the same
// output and, rank by rank, no call on a path the image decides and an open
// of the staged copy of loaded (what the app loads after MPI_Init).
func mpirunExact(t *testing.T, name string, perNode int, argv []string, want, loaded string) {
	t.Helper()
	work := filepath.Join(shared.Shared, name+"-run")
	os.RemoveAll(work)
	if err := os.MkdirAll(filepath.Join(work, "strace"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmdline := strings.Join(argv, " ")
	out := batchLong(t, name+"-pilot", fmt.Sprintf("mpirun -np 2 --map-by ppr:1:node %s trace -q -o %s/pilot.trace -- %s\n", dlb, work, cmdline), "-N2", "--ntasks-per-node=1")
	if strings.Count(out, want) != 2 {
		t.Fatalf("pilot run under mpirun:\n%s", out)
	}
	img := filepath.Join(work, name+".dlimg")
	// --include: the cluster's "shared file system" lies below /var/tmp,
	// which build leaves out by default (node-local scratch).
	if b, err := exec.Command(dlb, "build", "--include", shared.Shared, "-o", img, work+"/pilot.trace.0", work+"/pilot.trace.1").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, b)
	}
	decides := imageDecides(t, img)

	wrapper := filepath.Join(work, "strace-rank.sh")
	write(t, wrapper, fmt.Sprintf(rankStrace, filepath.Join(work, "strace")))
	os.Chmod(wrapper, 0o755)
	ranks := 3 * perNode
	alloc := []string{"-N3", fmt.Sprintf("--ntasks-per-node=%d", perNode)}
	mpirun := fmt.Sprintf("mpirun -np %d --map-by ppr:%d:node", ranks, perNode)
	native := batchLong(t, name+"-native", mpirun+" "+cmdline+" | sort\n", alloc...)
	stageDir := fmt.Sprintf("/dev/shm/t-%s-%d", name, time.Now().UnixNano())
	bundled := batchLong(t, name+"-exec", fmt.Sprintf("%s %s %s exec --stage-dir %s %s -- %s | sort\n", mpirun, wrapper, dlb, stageDir, img, cmdline), alloc...)
	if n := strings.Count(native, want); n != ranks {
		t.Fatalf("native run: %d of %d ranks reported:\n%s", n, ranks, native)
	}
	if resultLines(bundled) != resultLines(native) {
		t.Errorf("output under dlbundle exec differs from native:\nnative:\n%s\nexec:\n%s", native, bundled)
	}

	if keep := os.Getenv("CLUSTER_TEST_KEEP"); keep != "" {
		exec.Command("cp", "-a", work, keep).Run() // debugging: the logs and image
	}
	// Rank by rank: the app started from the stage, and made no call on a
	// path the image decides.
	var failed []string
	for r := 0; r < ranks; r++ {
		log := filepath.Join(work, "strace", fmt.Sprintf("rank.%d", r))
		b, err := os.ReadFile(log)
		if err != nil {
			t.Errorf("rank %d: no strace log: %v", r, err)
			continue
		}
		calls, staged := imageCalls(string(b), shared.Dir, decides)
		if !staged {
			t.Errorf("rank %d: no execve of a staged program in its strace log; the check cannot work", r)
		}
		if !strings.Contains(string(b), "/root"+loaded+"\", O_RDONLY") {
			t.Errorf("rank %d: no open of the staged copy of %s", r, loaded)
		}
		if len(calls) > 0 {
			why := ""
			if mkdirRoot.MatchString(string(b)) {
				why = " (its MPI_Init made the session directory from \"/\": mkdir(\"/tmp\") = EEXIST)"
			}
			failed = append(failed, fmt.Sprintf("rank %d: %d calls on image paths%s, first: %s", r, len(calls), why, strings.Join(calls[:min(3, len(calls))], " | ")))
		}
	}
	if len(failed) > 0 {
		t.Errorf("%d of %d ranks looked up paths the image holds on the file system (the shim did not serve them):\n%s",
			len(failed), ranks, strings.Join(failed, "\n"))
	}
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func compile(t *testing.T, cc string, args ...string) {
	t.Helper()
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", cc, args, err, out)
	}
}

// resultLines is the sorted "rank ..." lines of a job's output.
func resultLines(out string) string {
	var l []string
	for _, s := range strings.Split(out, "\n") {
		if strings.HasPrefix(s, "rank ") {
			l = append(l, s)
		}
	}
	sort.Strings(l)
	return strings.Join(l, "\n")
}

// batchLong is batch with a name of its own and a longer wait (ranks under
// strace on a 2-core machine shared with other work).
func batchLong(t *testing.T, name, script string, args ...string) string {
	t.Helper()
	file := filepath.Join(shared.Shared, name+".sh")
	out := filepath.Join(shared.Shared, name+".out")
	os.Remove(out)
	body := "#!/bin/bash\nset -u\nexport OMPI_MCA_btl=self,tcp OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1\n" +
		script + "echo batch-done\n"
	write(t, file, body)
	r := runCmd(t, shared.Command("sbatch", append(append([]string{"--parsable", "-o", out}, args...), file)...))
	if r.code != 0 {
		t.Fatalf("sbatch: %s", r.out)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(out)
		if strings.Contains(string(b), "batch-done") {
			return string(b)
		}
		time.Sleep(200 * time.Millisecond)
	}
	b, _ := os.ReadFile(out)
	t.Fatalf("batch job %s did not finish within 5 minutes:\n%s\n%s\n%s", strings.TrimSpace(r.out), b, hangReport(), shared.Logs())
	return ""
}

// hangReport says where a batch job's ranks are when it did not finish:
// their processes (state, kernel wait channel) and the last calls of each
// rank's strace log.
func hangReport() string {
	var r strings.Builder
	ps, _ := exec.Command("ps", "-eo", "pid,ppid,etime,pcpu,stat,wchan:24,args", "--forest").Output()
	r.WriteString("--- processes of the job\n")
	for _, l := range strings.Split(string(ps), "\n") {
		if strings.Contains(l, "python3") || strings.Contains(l, "dlbundle") || strings.Contains(l, "strace") ||
			strings.Contains(l, "orted") || strings.Contains(l, "mpirun") {
			r.WriteString(l + "\n")
		}
	}
	logs, _ := filepath.Glob(filepath.Join(shared.Shared, "*-run", "strace", "rank.*"))
	for _, f := range logs {
		b, _ := os.ReadFile(f)
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > 4 {
			lines = lines[len(lines)-4:]
		}
		fmt.Fprintf(&r, "--- %s (last lines)\n%s\n", f, strings.Join(lines, "\n"))
	}
	return r.String()
}

// imageDecides returns a function saying whether the image decides an
// absolute, clean path: an entry other than external, a name absent from a
// bundled directory's listing, or a path below a bundled file.
func imageDecides(t *testing.T, img string) func(string) bool {
	t.Helper()
	im, err := image.OpenFile(img)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	types := map[string]image.Type{}
	listed := map[string]bool{} // names of bundled listings: external unless entries
	for _, e := range im.Entries() {
		types[e.Path] = e.Type
		for _, d := range e.Listing {
			listed[path.Join(e.Path, d.Name)] = true
		}
	}
	if len(types) < 10 {
		t.Fatalf("image %s has %d entries; the check cannot work", img, len(types))
	}
	return func(p string) bool {
		if ty, ok := types[p]; ok {
			return ty != image.TypeExternal
		}
		for q := p; q != "/"; {
			parent := path.Dir(q)
			switch types[parent] {
			case image.TypeDir:
				return q == p && !listed[q] // absent from a bundled listing: a known ENOENT
			case image.TypeRegular:
				return true // below a file: a known ENOTDIR
			case image.TypeExternal, image.TypeMissing, image.TypeSymlink:
				return false // outside, or through a link (resolved elsewhere)
			}
			q = parent
		}
		return false
	}
}

// mkdirRoot matches Open MPI's walk from "/" as it starts: mkdir of /tmp.
var mkdirRoot = regexp.MustCompile(`(?m)^\d+ +mkdir(?:at\(AT_FDCWD(?:<[^>]*>)?, |\()"/tmp", 0\d+\) += -1 EEXIST`)

// straceCall matches the start of an strace line: pid, call, the first
// argument when it is a directory fd (with -y: and the file it names), then
// the first string.
var straceCall = regexp.MustCompile(`^\d+ +(\w+)\((?:(AT_FDCWD|-?\d+)(?:<([^>]*)>)?, )?"((?:[^"\\]|\\.)*)"`)

// imageCalls returns the calls of an strace log whose path argument the
// image decides (relative paths taken from cwd), from the app's start on,
// and whether the log shows that start: an execve of a program in a stage.
// (dlbundle's own calls before it, staging on the node, are not the app's.)
func imageCalls(log, cwd string, decides func(string) bool) (calls []string, staged bool) {
	for _, l := range strings.Split(log, "\n") {
		m := straceCall.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		p := m[4]
		if m[1] == "execve" && strings.Contains(p, "/sha256-") && !strings.Contains(l, "= -1") {
			staged = true
		}
		if !staged || p == "" || p == "/" {
			// Before the app; an fd's own (AT_EMPTY_PATH); or "/", every
			// node's own root directory: glibc's nsswitch stats it with an
			// internal call (no preload sees it) and libudev opens it
			// O_PATH to walk /sys from it.
			continue
		}
		if strings.Contains(p, `\`) {
			continue // escaped bytes: not a path of the image
		}
		if !strings.HasPrefix(p, "/") {
			switch {
			case m[2] == "" || m[2] == "AT_FDCWD":
				p = filepath.Join(cwd, p)
			case strings.HasPrefix(m[3], "/"):
				p = filepath.Join(m[3], p) // strace -y names the descriptor's file
			default:
				calls = append(calls, "(cannot tell the directory) "+l)
				continue
			}
		}
		if decides(path.Clean(p)) {
			calls = append(calls, l)
		}
	}
	return calls, staged
}

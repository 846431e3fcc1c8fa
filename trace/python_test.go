package trace

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// pythonImports is a stdlib import set with pure-Python modules, packages,
// C extensions (.so: _decimal, _sqlite3, _ctypes, ...) and a subprocess.
const pythonImports = "import json, decimal, email.mime.text, sqlite3, ctypes, xml.etree.ElementTree, " +
	"logging, argparse, csv, hashlib, datetime, pathlib, subprocess; subprocess.run(['/bin/true'], check=True)"

// pythonCommand runs Debian's python3 as users do (site, .pth files) but in
// an environment the test controls: no user site, no bytecode writing.
func pythonCommand(home, code string) []string {
	return []string{"/usr/bin/env", "-i", "HOME=" + home, "PATH=/usr/bin:/bin",
		"PYTHONDONTWRITEBYTECODE=1", "PYTHONNOUSERSITE=1", "/usr/bin/python3", "-c", code}
}

// straceLine: PID NAME(ARGS) = RESULT [ERRNO (text)]
var straceLine = regexp.MustCompile(`^(\d+) +(\w+)\((.*)\) += (-?\d+|\?)(?: (E[A-Z0-9]+))?`)

// straceFirstPath returns the first path argument of a strace line and
// whether it is relative to the cwd (AT_FDCWD or an old-style call).
func straceFirstPath(args string) (string, bool) {
	i := strings.IndexByte(args, '"')
	if i < 0 {
		return "", false
	}
	j := strings.IndexByte(args[i+1:], '"')
	if j < 0 {
		return "", false
	}
	pre := strings.TrimSpace(args[:i])
	if pre != "" && pre != "AT_FDCWD," {
		return "", false // relative to a dirfd: not resolvable from strace's text
	}
	return args[i+1 : i+1+j], true
}

type pathSets struct {
	opened  map[string]bool // .py, .pyc, .so files opened successfully
	missing map[string]bool // paths that came back ENOENT
}

func isPythonObject(p string) bool {
	return strings.HasSuffix(p, ".py") || strings.HasSuffix(p, ".pyc") || strings.Contains(filepath.Base(p), ".so")
}

// TestPythonImportsMatchStrace traces Python importing a stdlib set and
// checks the trace against what strace records for the same run: the same
// .py/.pyc/.so files opened and the same missing-path (ENOENT) probes.
func TestPythonImportsMatchStrace(t *testing.T) {
	if _, err := exec.LookPath("strace"); err != nil {
		t.Fatal("strace is needed (make deps installs it)")
	}
	cwd, home := t.TempDir(), t.TempDir()
	t.Chdir(cwd)
	command := pythonCommand(home, pythonImports)

	tr, res := traceRun(t, command...)
	if res.Exit != 0 {
		t.Fatalf("python exited %d", res.Exit)
	}
	// subprocess.run: a child process of python execs /bin/true.
	python := mustFind(t, tr, OpExec, "/usr/bin/python3", "").PID
	if e := mustFind(t, tr, OpExec, "/bin/true", ""); e.PID == python {
		t.Errorf("subprocess exec recorded in python's own process %d", python)
	}
	got := pathSets{map[string]bool{}, map[string]bool{}}
	for _, e := range tr.Events {
		switch {
		case e.Op == OpOpen && e.OK() && isPythonObject(e.Path):
			got.opened[e.Path] = true
		case e.Err == "ENOENT" && e.Path != "":
			got.missing[e.Path] = true
		}
	}

	// The same run under strace, restricted to the calls dlbundle traces.
	var names []string
	for _, s := range syscallTable {
		if s.name != "fchmodat2" { // newer than Debian 12's strace
			names = append(names, s.name)
		}
	}
	log := filepath.Join(t.TempDir(), "strace.out")
	st := exec.Command("strace", append([]string{"-f", "-qq", "-s", "4096", "-e", "signal=none",
		"-e", "trace=" + strings.Join(names, ","), "-o", log}, command...)...)
	st.Dir = cwd
	if out, err := st.CombinedOutput(); err != nil {
		t.Fatalf("strace: %v\n%s", err, out)
	}
	f, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := pathSets{map[string]bool{}, map[string]bool{}}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		m := straceLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		p, ok := straceFirstPath(m[3])
		if !ok || p == "" {
			continue
		}
		if unq, err := strconv.Unquote(`"` + p + `"`); err == nil {
			p = unq
		}
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		p = filepath.Clean(p)
		switch {
		case strings.HasPrefix(m[2], "open") && m[4] != "?" && !strings.HasPrefix(m[4], "-") && isPythonObject(p):
			want.opened[p] = true
		case m[5] == "ENOENT":
			want.missing[p] = true
		}
	}
	if len(want.opened) < 50 || len(want.missing) < 20 {
		t.Fatalf("strace saw only %d objects, %d missing paths: is the import set running?", len(want.opened), len(want.missing))
	}
	compareSets(t, "opened .py/.pyc/.so", got.opened, want.opened)
	compareSets(t, "ENOENT probes", got.missing, want.missing)

	// Python's FileFinder lists each sys.path directory once: the listing
	// must be complete and exact.
	jsonPkg := findModule(t, got.opened, "/json/")
	stdlib := jsonPkg[:strings.Index(jsonPkg, "/json/")]
	ls := mustFind(t, tr, OpListdir, stdlib, "")
	ents, _ := os.ReadDir(stdlib)
	var fsNames, trNames []string
	for _, e := range ents {
		fsNames = append(fsNames, e.Name())
	}
	for _, e := range ls.Entries {
		trNames = append(trNames, e.Name)
	}
	sort.Strings(trNames)
	if strings.Join(fsNames, "\n") != strings.Join(trNames, "\n") {
		t.Errorf("listing of %s: %d names in the trace, %d on disk", stdlib, len(trNames), len(fsNames))
	}
}

func findModule(t *testing.T, set map[string]bool, part string) string {
	for p := range set {
		if strings.Contains(p, part) {
			return p
		}
	}
	t.Fatalf("no %s among the opened files", part)
	return ""
}

func compareSets(t *testing.T, what string, got, want map[string]bool) {
	t.Helper()
	var missing, extra []string
	for p := range want {
		if !got[p] {
			missing = append(missing, p)
		}
	}
	for p := range got {
		if !want[p] {
			extra = append(extra, p)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing)+len(extra) > 0 {
		t.Errorf("%s: %d in strace only: %v\n%d in the trace only: %v", what, len(missing), missing, len(extra), extra)
	}
	t.Logf("%s: %d paths, same set as strace", what, len(want))
}

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// python is Debian's interpreter (not a pyenv shim on PATH).
const python = "/usr/bin/python3"

// cpythonExcluded are the regression-test modules not run, and why. Every
// other module `python3 -m test --list-tests` names is run (Debian's
// libpython3.11-testsuite), with regrtest's default resources (none: no
// network, no GUI, no large files, no audio: those tests skip themselves).
var cpythonExcluded = map[string]string{
	"test_tkinter": "GUI (no display; python3-tk is not installed)", "test_ttk": "GUI", "test_ttk_textonly": "GUI",
	"test_idle": "GUI", "test_turtle": "GUI", "test_tix": "GUI",
	"test_multiprocessing_fork":       "resource-hungry: 10+ min per start method on 2 shared cores, timing-sensitive",
	"test_multiprocessing_forkserver": "resource-hungry (as above)", "test_multiprocessing_spawn": "resource-hungry (as above)",
	"test_concurrent_futures": "resource-hungry: ~5 min of process pools, timing-sensitive",
	"test_peg_generator":      "compiles C extensions for minutes; needs the CPython source tree's Tools",
	"test_tools":              "needs the CPython source tree's Tools/ (not in Debian's test suite)",
	"test_gdb":                "needs gdb and a debug build",
	"test_ssl":                "network (certificates from the net, servers); most of it needs -u network",
	"test_socket":             "network: one worker waited on it for more than 10 minutes here (timeouts in this sandbox)",
	"test_socketserver":       "network", "test_urllib2net": "network", "test_urllibnet": "network",
	"test_timeout": "network", "test_smtpnet": "network", "test_nntplib": "network",
	"test_largefile": "resource-hungry: writes multi-GB files to /tmp (the machine is shared)",
	"test_zipfile64": "resource-hungry: multi-GB zip files",
}

// cpythonSubset is -subset's modules: those that exercise paths, imports,
// processes and signals (what the shim touches).
var cpythonSubset = []string{
	"test_os", "test_posixpath", "test_glob", "test_shutil", "test_importlib", "test_site", "test_subprocess",
	"test_signal", "test_pathlib", "test_tempfile", "test_fileinput", "test_filecmp", "test_zipimport",
	"test_zipfile", "test_tarfile", "test_compileall", "test_py_compile", "test_import", "test_runpy",
	"test_pkgutil", "test_modulefinder", "test_cmd_line", "test_cmd_line_script", "test_sysconfig",
	"test_venv", "test_pty", "test_threading", "test_builtin", "test_sys", "test_linecache", "test_inspect",
	"test_traceback", "test_io", "test_fileio", "test_mmap", "test_stat", "test_genericpath", "test_ntpath",
	"test_shlex", "test_posix", "test_resource", "test_ctypes", "test_dbm", "test_sqlite3", "test_logging",
	"test_doctest", "test_zoneinfo", "test_locale", "test_gettext", "test_mimetypes",
}

func cpythonModules(c *Ctx) ([]string, error) {
	if c.Subset {
		return cpythonSubset, nil
	}
	cmd := exec.Command(python, "-m", "test", "--list-tests")
	cmd.Env, cmd.Dir = c.Env, c.Work
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("python3 -m test --list-tests: %v (is libpython3.11-testsuite installed?)", err)
	}
	var mods []string
	for _, m := range strings.Fields(string(out)) {
		if _, ok := cpythonExcluded[m]; !ok && strings.HasPrefix(m, "test_") {
			mods = append(mods, m)
		}
	}
	sort.Strings(mods)
	return mods, nil
}

func cpythonCorpus() *Corpus {
	var mods []string
	var excluded []string
	for _, m := range sortedKeys(cpythonExcluded) {
		excluded = append(excluded, fmt.Sprintf("%s (%s)", m, cpythonExcluded[m]))
	}
	return &Corpus{
		Name: "cpython",
		What: "CPython 3.11's regression suite (Debian libpython3.11-testsuite): every module `python3 -m test " +
			"--list-tests` names except " + fmt.Sprint(len(cpythonExcluded)) + " excluded: " + strings.Join(excluded, "; ") +
			". Run as `/usr/bin/python3 -m test -j2 --timeout 1200 --junit-xml FILE MODULES` (default resources: no -u), " +
			"outcome per test case. Pilot: `python3 -m test --list-cases MODULES` (imports every test module).",
		Setup: func(c *Ctx) error {
			if _, err := os.Stat("/usr/lib/python3.11/test/test_os.py"); err != nil {
				return fmt.Errorf("CPython's test suite is missing: apt-get install libpython3.11-testsuite (make conformance-deps)")
			}
			var err error
			mods, err = cpythonModules(c)
			return err
		},
		Pilot: func(c *Ctx) Run {
			return Run{Argv: append([]string{python, "-m", "test", "--list-cases"}, mods...), Env: c.Env, Dir: mkdir(c, "cpython-pilot")}
		},
		BuildArgs: func(c *Ctx) []string { return nil },
		Runs: func(c *Ctx) []NamedRun {
			xml := filepath.Join(c.Work, "cpython.junit.xml")
			return []NamedRun{{Name: "regrtest", Run: Run{
				Argv: append([]string{python, "-m", "test", "-j2", "--timeout", "1200", "--junit-xml", xml}, mods...),
				Env:  c.Env, Dir: mkdir(c, "cpython-run"), Output: xml,
			}}}
		},
		Parse: func(c *Ctx, nr NamedRun, out []byte) (Outcomes, error) { return ParseJUnit(bytes.NewReader(out)) },
	}
}

// pytestCorpus runs a package's own test suite with pytest (--pyargs):
// the full suite, no marker deselected.
func pytestCorpus(name, pkg, subset, deb string) *Corpus {
	target := func(c *Ctx) string {
		if c.Subset {
			return subset
		}
		return pkg
	}
	return &Corpus{
		Name: name,
		What: fmt.Sprintf("%s's own test suite, complete (Debian %s, python3-pytest, python3-hypothesis): "+
			"`/usr/bin/python3 -m pytest --pyargs %s -p no:cacheprovider --continue-on-collection-errors --junitxml FILE` in an "+
			"empty directory, outcome per test (parametrised ids included; a module that cannot be imported, e.g. scipy.datasets "+
			"without pooch, counts as one error). Memory: NPY_AVAILABLE_MEM=SCIPY_AVAILABLE_MEM=2GB (tests that declare more skip "+
			"themselves) and an address-space limit of 6 GiB (RLIMIT_AS; a test that asks for more fails alike in every run): "+
			"the machine is shared, and the unlimited suite was OOM-killed at 23 GB. Pilot: the same with --collect-only "+
			"(imports every test module).", pkg, deb, pkg),
		Setup: func(c *Ctx) error {
			cmd := exec.Command(python, "-c", "import pytest, hypothesis, "+pkg)
			cmd.Env = c.Env
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("%s, pytest or hypothesis missing: apt-get install %s python3-pytest python3-hypothesis (make conformance-deps)\n%s", pkg, deb, out)
			}
			return nil
		},
		Pilot: func(c *Ctx) Run {
			return Run{Argv: []string{python, "-m", "pytest", "--pyargs", target(c), "-p", "no:cacheprovider", "--collect-only", "-q",
				"--continue-on-collection-errors"}, Env: memEnv(c.Env), Dir: mkdir(c, name+"-pilot")}
		},
		BuildArgs: func(c *Ctx) []string { return nil },
		Runs: func(c *Ctx) []NamedRun {
			xml := filepath.Join(c.Work, name+".junit.xml")
			return []NamedRun{{Name: "pytest", Run: Run{
				Argv: []string{python, "-m", "pytest", "--pyargs", target(c), "-p", "no:cacheprovider", "-q", "-ra",
					"--continue-on-collection-errors", "--junitxml", xml, "-o", "junit_family=xunit1"},
				Env: memEnv(c.Env), Dir: mkdir(c, name+"-run"), Output: xml, MemLimit: corpusMemLimit,
			}}}
		},
		Parse: func(c *Ctx, nr NamedRun, out []byte) (Outcomes, error) { return ParseJUnit(bytes.NewReader(out)) },
	}
}

func numpyCorpus() *Corpus {
	return pytestCorpus("numpy", "numpy", "numpy.lib.tests.test_io", "python3-numpy")
}

func scipyCorpus() *Corpus {
	return pytestCorpus("scipy", "scipy", "scipy.io", "python3-scipy")
}

// corpusMemLimit is the address space a Python corpus may use.
const corpusMemLimit = 6 << 30

// memEnv tells numpy's and scipy's tests how much memory they may take:
// those that need more skip themselves.
func memEnv(env []string) []string {
	return append(append([]string{}, env...), "NPY_AVAILABLE_MEM=2GB", "SCIPY_AVAILABLE_MEM=2GB")
}

// mkdir makes (anew) a scratch directory for a corpus's runs; each run is
// started in a fresh one, so that nothing one run left behind (a
// .hypothesis database, temp files) is seen by the next.
func mkdir(c *Ctx, name string) string {
	d := filepath.Join(c.Work, name)
	os.RemoveAll(d)
	os.MkdirAll(d, 0o755)
	return d
}

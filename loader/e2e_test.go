package loader

// End-to-end: trace -> build -> exec with the real CLI, real programs and
// strace, asserting that under exec the app makes ZERO file-system system
// calls on the paths the image holds.

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/clitest"
	"github.com/dlbundle/dlbundle/loader/stagefmt"
)

func runIn(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr)
	}
	return string(out)
}

// bundledPaths are the paths whose lookups the shim answers from the stage:
// bundled files, directories and symlinks, and known-missing paths; external
// are those the image lists as existing but not bundled (entries of type
// external, and names in bundled directories' listings): lookups pass through.
func bundledPaths(t *testing.T, img string) (bundled, external map[string]bool) {
	im, err := image.OpenFile(img)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	bundled, external = map[string]bool{}, map[string]bool{}
	for _, e := range im.Entries() {
		switch e.Type {
		case image.TypeRegular, image.TypeDir, image.TypeSymlink, image.TypeMissing:
			bundled[e.Path] = true
		case image.TypeExternal:
			external[e.Path] = true
		}
		// Names in a bundled directory's listing that are not entries of
		// their own exist but are not bundled either.
		for _, d := range e.Listing {
			if p := filepath.Join(e.Path, d.Name); !bundled[p] {
				external[p] = true
			}
		}
	}
	for p := range bundled {
		delete(external, p)
	}
	return bundled, external
}

var (
	straceCall   = regexp.MustCompile(`^\d+\s+(?:<\.\.\. )?([a-z0-9_]+)[( ]`)
	straceString = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`)
	straceFDPath = regexp.MustCompile(`^\s*(?:AT_FDCWD|\d+<([^>]*)>)\s*,\s*"`)
)

// straceOps returns, for each path, the strace lines of system calls that
// looked it up: path arguments (relative ones resolved against the dirfd's
// path that -y prints, or cwd), and fds that -y shows to be open on it.
func straceOps(t *testing.T, log, cwd string) map[string][]string {
	f, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ops := map[string][]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		m := straceCall.FindStringSubmatch(line)
		if m == nil {
			continue // signals, exits
		}
		call := m[1]
		args := line[strings.Index(line, call)+len(call):]
		if strings.HasPrefix(args, " resumed>") {
			// The second half of a call another process interrupted:
			// strace printed the inputs (the path) on its "unfinished"
			// line, and prints only outputs here, such as the link text
			// readlinkat read back, which is no lookup.
			continue
		}
		args = strings.TrimPrefix(args, "(")
		strs := straceString.FindAllStringSubmatchIndex(args, -1)
		switch call {
		case "execve", "execveat", "readlink", "readlinkat":
			// argv and the link text read back are not lookups.
			if len(strs) > 1 {
				strs = strs[:1]
			}
		case "symlink", "symlinkat":
			if len(strs) > 0 {
				strs = strs[1:] // the first string is the link's text
			}
		}
		for i, s := range strs {
			p := args[s[2]:s[3]]
			if p == "" {
				continue // fstatat(fd, "", AT_EMPTY_PATH): no lookup; the open of fd is counted
			}
			if !strings.HasPrefix(p, "/") {
				base := cwd
				if i == 0 {
					if fd := straceFDPath.FindStringSubmatch(args[:s[1]]); fd != nil && fd[1] != "" {
						base = fd[1]
					}
				}
				p = filepath.Join(base, p)
			}
			ops[filepath.Clean(p)] = append(ops[filepath.Clean(p)], line)
		}
		// getdents64(3</usr/lib/python3.11>, ...) lists a directory by fd.
		if call == "getdents64" {
			if m := regexp.MustCompile(`^\d+<([^>]*)>`).FindStringSubmatch(args); m != nil {
				ops[m[1]] = append(ops[m[1]], line)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return ops
}

// ldsoProbeTouches are the paths the stager looks up for the node's search
// rules (node/materialize/ldsearch.go): the node's ld.so, which it opens (node-local, once per
// cold stage; the kernel maps it for every dynamically linked program
// anyway). With --help (glibc >= 2.33, as here) ld.so itself looks up
// nothing outside the stage.
func ldsoProbeTouches() map[string]bool {
	return map[string]bool{stagefmt.DynamicLinker(): true}
}

// leaks counts the operations on bundled paths and describes them, one line
// per path: how many system calls, and the first of them.
// A call that creates a directory is the app's own write, which the shim
// passes on whatever the table says (it is not a lookup the image answers).
func leaks(ops map[string][]string, bundled map[string]bool) (n int, report []string) {
	for p, lines := range ops {
		if !bundled[p] {
			continue
		}
		var calls []string
		for _, l := range lines {
			if m := straceCall.FindStringSubmatch(l); m == nil || (m[1] != "mkdir" && m[1] != "mkdirat") {
				calls = append(calls, l)
			}
		}
		if len(calls) > 0 {
			n += len(calls)
			report = append(report, fmt.Sprintf("%4d  %s\n        e.g. %s", len(calls), p, calls[0]))
		}
	}
	sort.Strings(report)
	return n, report
}

// glibcInternalHint explains leaks of files that glibc opens with its internal
// open (setlocale, iconv, locale.alias), which no LD_PRELOAD symbol sees.
func glibcInternalHint(report []string) string {
	for _, r := range report {
		if strings.Contains(r, "/usr/lib/locale/") || strings.Contains(r, "/gconv/") || strings.Contains(r, "locale.alias") {
			return "\n(locale, gconv and locale.alias files are opened by glibc internally (__open_nocancel), " +
				"out of reach of LD_PRELOAD: build should leave them out of the image (external; /usr is " +
				"node-local on most clusters). Pointing LOCPATH at the stage is no fix: glibc then also " +
				"probes the default path, an operation the native run does not make.)"
		}
	}
	return ""
}

type e2eApp struct {
	name  string
	setup func(t *testing.T, dir string) []string // returns the command
	// include: build --include for the app's tree (tests build it under
	// TMPDIR, which build leaves out by default).
	include bool
}

// pilot traces the app's command in dir and builds dir/app.dlimg from the
// trace, as a user would; it returns the image.
func (a e2eApp) pilot(t *testing.T, dir string, env []string, bin string, cmd []string) string {
	t.Helper()
	runIn(t, dir, env, bin, append([]string{"trace", "--"}, cmd...)...)
	build := []string{"build", "-o", "app.dlimg"}
	if a.include {
		build = append(build, "--include", filepath.Join(dir, "app"))
	}
	runIn(t, dir, env, bin, build...)
	return filepath.Join(dir, "app.dlimg")
}

// cRunpathDlopen is examples/demo's C app: 40 libraries through RUNPATH,
// plugins it dlopens by name, a data file (exec's and env's zero-operation
// tests both run it).
var cRunpathDlopen = e2eApp{"c-runpath-dlopen", func(t *testing.T, dir string) []string {
	gen, err := filepath.Abs("../examples/demo/make-fixture.sh")
	if err != nil {
		t.Fatal(err)
	}
	runIn(t, dir, clitest.CleanEnv(dir), gen, filepath.Join(dir, "app"), "40")
	return []string{filepath.Join(dir, "app/bin/demo-app")}
}, true}

func TestExecZeroOperationsOnBundledPaths(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Fatal("dlbundle runs on Linux")
	}
	for _, tool := range []string{"strace", "gcc", "/usr/bin/python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed (make deps installs it): %v", tool, err)
		}
	}
	bin := clitest.CLI(t)
	apps := []e2eApp{
		cRunpathDlopen,
		// A script named relative to the working directory with
		// ".." over it (the cwd is not in the image: only app/ is), a
		// sys.path entry of the same form, realpath through a symlink.
		{"python-dotdot-cwd", func(t *testing.T, dir string) []string {
			for rel, content := range map[string]string{
				"app/main.py":        "import os, sys\nsys.path.insert(0, '../" + filepath.Base(dir) + "/app/lib')\nimport mod\nprint(mod.V, os.path.realpath('../" + filepath.Base(dir) + "/app/link/mod.py'))\n",
				"app/lib/mod.py":     "V = 42\n",
				"app/lib/unused.txt": "",
			} {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, rel)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, rel), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Symlink("lib", filepath.Join(dir, "app/link")); err != nil {
				t.Fatal(err)
			}
			return []string{"/usr/bin/python3", "-I", "../" + filepath.Base(dir) + "/app/main.py"}
		}, true},
		{"python-stdlib", func(t *testing.T, dir string) []string {
			return []string{"/usr/bin/python3", "-c", "import json, decimal, argparse, email.parser, " +
				"http.client, xml.etree.ElementTree, logging, sqlite3, asyncio, unittest; print('ok')"}
		}, false},
		{"python-numpy", func(t *testing.T, dir string) []string {
			return []string{"/usr/bin/python3", "-c", "import numpy; print(numpy.arange(10).sum())"}
		}, false},
		// Writes that change nothing keep the image in use.
		// CPython's regrtest and pytest do os.makedirs('/tmp', exist_ok=True)
		// (mkdir("/tmp") = EEXIST marked "/", then every lookup went to the
		// file system); matplotlib makedirs its existing config directory;
		// Open MPI 4.1 creates its session directory by a mkdir of every
		// component from "/" (EEXIST on all but the last), all before the
		// imports that matter.
		{"python-failed-writes-numpy", func(t *testing.T, dir string) []string {
			return []string{"/usr/bin/python3", "-c", "import os, sys\n" +
				"os.makedirs('/tmp', exist_ok=True)\n" +
				"os.makedirs(os.path.dirname(os.__file__) + '/json', exist_ok=True)\n" +
				"p = ''\n" +
				"for c in '" + dir + "/ompi.node.0/jf.1/0'.split('/')[1:]:\n" +
				"    p += '/' + c\n" +
				"    try: os.mkdir(p)\n" +
				"    except FileExistsError: pass\n" +
				"import numpy, json\n" +
				"print(numpy.arange(10).sum())"}
		}, false},
	}
	for _, app := range apps {
		t.Run(app.name, func(t *testing.T) {
			dir := t.TempDir()
			cmd := app.setup(t, dir)
			env := clitest.CleanEnv(dir)
			img := app.pilot(t, dir, env, bin, cmd)
			bundled, external := bundledPaths(t, img)

			native := runIn(t, dir, env, cmd[0], cmd[1:]...)
			execArgs := append([]string{"exec", "--stage-dir", filepath.Join(dir, "stage"), img, "--"}, cmd...)

			strace := func(name string, args ...string) map[string][]string {
				log := filepath.Join(dir, name+".strace")
				out := runIn(t, dir, env, "strace", append([]string{"-f", "-qq", "-y", "-s", "4096",
					"-e", "trace=%file,getdents64", "-o", log}, args...)...)
				if out != native {
					t.Fatalf("%s: output differs from the native run:\nnative: %q\ngot:    %q", name, native, out)
				}
				return straceOps(t, log, dir)
			}
			// The first rank on the node stages (reads the image, writes the
			// stage): that must not touch the bundled originals either.
			// Except the node's own ld.so, which it opens for the node's
			// search rules (node/materialize/ldsearch.go).
			cold := strace("exec-cold", append([]string{bin}, execArgs...)...)
			for p := range ldsoProbeTouches() {
				delete(cold, p)
			}
			if n, report := leaks(cold, bundled); n != 0 {
				t.Errorf("the staging exec made %d system calls on bundled original paths:\n%s%s",
					n, strings.Join(report[:min(len(report), 40)], "\n"), glibcInternalHint(report))
			}
			// The check must be able to fail: natively the app looks up bundled paths.
			nNative, _ := leaks(strace("native", cmd...), bundled)
			if nNative == 0 {
				t.Fatalf("natively the app made no operation on its %d bundled paths: the check is broken", len(bundled))
			}
			// A later rank: the stage is warm.
			execOps := strace("exec", append([]string{bin}, execArgs...)...)
			n, report := leaks(execOps, bundled)
			t.Logf("%d bundled paths; file-system operations on them: native %d, exec %d", len(bundled), nNative, n)
			// Not asserted (the image says they are not bundled), but they
			// still reach the shared file system at every start: show them.
			if nExt, ext := leaks(execOps, external); nExt > 0 {
				t.Logf("under exec %d operations on %d paths the image lists as external (not bundled), e.g.\n%s",
					nExt, len(ext), strings.Join(ext[:min(len(ext), 5)], "\n"))
			}
			if n != 0 {
				if len(report) > 40 {
					report = append(report[:40], "...")
				}
				t.Errorf("under exec %d system calls still reached %d bundled original paths (count, path, first call):\n%s%s",
					n, len(report), strings.Join(report, "\n"), glibcInternalHint(report))
			}
		})
	}
}

package platform

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// TestCrossGlibc: an image built on one node runs on a node with another
// glibc and prints what it prints natively on the node that built it. The
// nodes are this machine (Debian 12, glibc 2.36) and the x86-64 chroots
// (Debian 11, 2.31; Debian 13, 2.41): every ordered pair of them. The
// kernel would take the run node's ld.so from the program's PT_INTERP and
// pair it with the image's libc (death before main); exec starts the image's
// own ld.so instead, as staging recorded (STAGE/ldso), so the stage of a
// cross pair must hold that record and a same-glibc stage must not.
// A warm exec under strace makes no system call on a path the image bundles.
// Apps: python3 importing numpy, and the demo C app (RUNPATH $ORIGIN,
// dlopen by name, /proc/self/exe read to find its data).
func TestCrossGlibc(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("the chroots are prepared for an x86-64 host")
	}
	if os.Getuid() != 0 {
		t.Skip("needs root (chroot, mount namespaces); make test runs as root")
	}
	if _, err := os.Stat("/usr/bin/gcc"); err != nil {
		t.Fatalf("gcc is needed: %v", err)
	}
	nodes := crossNodes(t)
	apps := []crossApp{
		{"numpy", func(*testing.T, *chroot) []string {
			return []string{"/usr/bin/python3", "-c",
				"import numpy, sys; print(numpy.arange(10).sum(), numpy.__version__, sys.version_info[:2], sys.executable)"}
		}, nil},
		{"capp", func(t *testing.T, build *chroot) []string { return []string{build.demoApp(t)} }, nil},
	}
	crossPairs(t, nodes, apps)
}

// crossApp is an app of the cross-glibc tests: argv gives its command on
// the build node (after preparing what it needs there).
type crossApp struct {
	name     string
	argv     func(t *testing.T, build *chroot) []string
	nodeExec []string // programs glibc itself starts, by design the node's (leakCheck)
}

// crossPairs traces and builds each app on each node, and runs the image
// with dlbundle exec on every other node: the output must be the build
// node's native output, exec quiet, a warm exec under strace must make no
// system call on a path the image bundles, and the stage must hold the
// record of the image's ld.so (STAGE/ldso). A path counts when it leads
// through the image's symlinks to a bundled one (leakCheck).
func crossPairs(t *testing.T, nodes []*chroot, apps []crossApp) {
	for _, a := range apps {
		for _, build := range nodes {
			t.Run(a.name+"/"+build.name, func(t *testing.T) {
				argv := a.argv(t, build)
				native := build.must(t, argv...)
				img := build.work + "/" + a.name + ".dlimg"
				tr := build.work + "/" + a.name + ".trace"
				build.must(t, append([]string{build.work + "/dlbundle-amd64", "trace", "-q", "-o", tr, "--"}, argv...)...)
				build.must(t, build.work+"/dlbundle-amd64", "build", "-o", img, tr)
				data, err := os.ReadFile(filepath.Join(build.host, a.name+".dlimg"))
				if err != nil {
					t.Fatal(err)
				}
				for _, run := range nodes {
					if run == build {
						continue
					}
					t.Run("on-"+run.name, func(t *testing.T) {
						name := a.name + "-from-" + build.name + ".dlimg"
						if err := os.WriteFile(filepath.Join(run.host, name), data, 0o644); err != nil {
							t.Fatal(err)
						}
						stage := run.work + "/stage-" + a.name + "-" + build.name
						out, errOut, err := run.run(t, "", append([]string{run.work + "/dlbundle-amd64", "exec", "--stage-dir", stage,
							run.work + "/" + name, "--"}, argv...)...)
						if err != nil || out != native {
							t.Fatalf("image of %s on %s: %v\nstdout %q\nnative on %s %q\nstderr:\n%s", build.name, run.name, err, out, build.name, native, errOut)
						}
						if l := ldsoNoise.FindString(errOut); l != "" {
							t.Errorf("exec is not quiet (%q):\n%s", l, errOut)
						}
						// Warm, under strace: no call on a path the image bundles.
						log := filepath.Join(run.host, name+".strace")
						execArgv := append([]string{run.work + "/dlbundle-amd64", "exec", "--stage-dir", stage, run.work + "/" + name, "--"}, argv...)
						if out, _, err := run.run(t, log, execArgv...); err != nil || out != native {
							t.Fatalf("warm exec under strace: %v, stdout %q", err, out)
						}
						check := leakCheck{links: imageLinks(t, filepath.Join(run.host, name)), nodeExec: map[string]bool{}}
						for _, p := range a.nodeExec {
							check.nodeExec[p] = true
						}
						if n, report := leaksIn(t, log, bundledPaths(t, filepath.Join(run.host, name)), execArgv[0], check); n != 0 {
							t.Errorf("a warm exec made %d system calls on paths the image bundles:\n%s", n, strings.Join(report, "\n"))
						}
						links, _ := filepath.Glob(filepath.Join(run.root, stage, "sha256-*", "ldso"))
						if len(links) != 1 {
							t.Errorf("the stage has no record of the image's ld.so (STAGE/ldso): the check cannot have worked")
						}
					})
				}
			})
		}
	}
}

// The stage of an image on the node that built it has no STAGE/ldso: the
// mechanism costs a same-glibc node nothing but one failed readlink.
func TestSameGlibcStageHasNoLdsoRecord(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("x86-64 only")
	}
	dir := t.TempDir()
	cli := dlbundleFor(t, "amd64")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(cli, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("dlbundle %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("trace", "-q", "-o", "ls.trace", "--", "/bin/ls", "--version")
	run("build", "-o", "ls.dlimg", "ls.trace")
	run("exec", "--stage-dir", filepath.Join(dir, "stage"), "ls.dlimg", "--", "/bin/ls", "--version")
	stages, _ := filepath.Glob(filepath.Join(dir, "stage", "sha256-*"))
	if len(stages) != 1 {
		t.Fatalf("stages: %v", stages)
	}
	if _, err := os.Lstat(filepath.Join(stages[0], "ldso")); err == nil {
		t.Errorf("a stage on the node that built the image records another ld.so")
	}
}

// crossNodes: this machine and the x86-64 chroots as nodes of three glibc
// versions (DLBUNDLE_CROSS_NODES=host,bullseye-amd64 picks some); skips the
// test with fewer than two.
func crossNodes(t *testing.T) []*chroot {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("the chroots are prepared for an x86-64 host")
	}
	if os.Getuid() != 0 {
		t.Skip("needs root (chroot, mount namespaces); make test runs as root")
	}
	specs := []chrootSpec{
		{"host", "amd64", "", "/lib64/ld-linux-x86-64.so.2"}, // root "/": this machine as a node
		{"bullseye-amd64", "amd64", "", "/lib64/ld-linux-x86-64.so.2"},
		{"trixie-amd64", "amd64", "", "/lib64/ld-linux-x86-64.so.2"},
	}
	if only := os.Getenv("DLBUNDLE_CROSS_NODES"); only != "" { // e.g. host,bullseye-amd64
		var keep []chrootSpec
		for _, s := range specs {
			if strings.Contains(","+only+",", ","+s.name+",") {
				keep = append(keep, s)
			}
		}
		specs = keep
	}
	var nodes []*chroot
	for _, s := range specs {
		root := "/"
		if s.name != "host" {
			root = filepath.Join(chrootRoot(), s.name)
			if _, err := os.Stat(filepath.Join(root, "usr/bin/python3")); err != nil {
				t.Logf("chroot %s absent (%v): `make deps` prepares it; its pairs are skipped", s.name, err)
				continue
			}
		}
		nodes = append(nodes, newChroot(t, s, root))
	}
	if len(nodes) < 2 {
		t.Skip("fewer than two nodes: `make deps` prepares the chroots")
	}
	return nodes
}

// childScript runs, from Python's subprocess, a bundled program (printf,
// run by the pilot too) and, unless PILOT is set, a node program the pilot
// never ran (expr, env), which the image therefore lacks, one of which
// (env, under the node's ld.so) runs bundled programs in its turn. The
// bundled getconf prints the glibc it runs with: the image's, as on the
// build node, only if it was started under the image's ld.so.
const childScript = `import os, subprocess, sys
print(subprocess.run(["printf", "%s-%s\\n", "bundled", "child"], capture_output=True, text=True).stdout, end="")
print(os.confstr("CS_GNU_LIBC_VERSION"), subprocess.run(["getconf", "GNU_LIBC_VERSION"], capture_output=True, text=True).stdout, end="")
if not os.environ.get("PILOT"):
    r = subprocess.run(["/usr/bin/expr", "6", "*", "7"], capture_output=True, text=True)
    print(r.stdout.strip(), r.returncode, r.stderr)
    r = subprocess.run(["/usr/bin/env", "printf", "%s\\n", "node-to-bundled"], capture_output=True, text=True)
    print(r.stdout.strip(), r.returncode, r.stderr)
    r = subprocess.run(["/usr/bin/env", "getconf", "GNU_LIBC_VERSION"], capture_output=True, text=True)
    print("via env:", r.stdout.strip(), r.returncode, r.stderr)
print(sys.executable)`

// TestCrossGlibcChildren: on a node with another glibc, the programs a
// served process starts run too, with the output of the build node's native
// run: a bundled one (the shim's exec wrapper starts it under the image's
// ld.so, as exec does) and a node program the image lacks (it runs under the
// node's ld.so, and the shim gives that process the node's glibc objects,
// not the image's). `dlbundle env IMG -- CMD` prints the command under the
// image's ld.so, and the command it prints runs the same way.
func TestCrossGlibcChildren(t *testing.T) {
	nodes := crossNodes(t)
	argv := []string{"/usr/bin/python3", "-c", childScript}
	for _, build := range nodes {
		t.Run(build.name, func(t *testing.T) {
			native := build.must(t, argv...)
			if !strings.HasPrefix(native, "bundled-child\nglibc 2.") || !strings.Contains(native, "\n42 0 \nnode-to-bundled 0 \nvia env: glibc 2.") {
				t.Fatalf("natively: %q", native)
			}
			img := build.work + "/children.dlimg"
			tr := build.work + "/children.trace"
			build.must(t, append([]string{"/usr/bin/env", "PILOT=1", build.work + "/dlbundle-amd64", "trace", "-q", "-o", tr, "--"}, argv...)...)
			build.must(t, build.work+"/dlbundle-amd64", "build", "-o", img, tr)
			data, err := os.ReadFile(filepath.Join(build.host, "children.dlimg"))
			if err != nil {
				t.Fatal(err)
			}
			if bundled := bundledPaths(t, filepath.Join(build.host, "children.dlimg")); bundled["/usr/bin/expr"] || bundled["/usr/bin/env"] {
				t.Fatalf("the image holds /usr/bin/expr or /usr/bin/env: the test needs node programs it lacks")
			}
			for _, run := range nodes {
				if run == build {
					continue
				}
				t.Run("on-"+run.name, func(t *testing.T) {
					name := "children-from-" + build.name + ".dlimg"
					if err := os.WriteFile(filepath.Join(run.host, name), data, 0o644); err != nil {
						t.Fatal(err)
					}
					stage := run.work + "/stage-children-" + build.name
					out, errOut, err := run.run(t, "", append([]string{run.work + "/dlbundle-amd64", "exec", "--stage-dir", stage,
						run.work + "/" + name, "--"}, argv...)...)
					if err != nil || out != native {
						t.Fatalf("image of %s on %s: %v\nstdout %q\nnative on %s %q\nstderr:\n%s", build.name, run.name, err, out, build.name, native, errOut)
					}
					// Warm, under strace: no call on a path the image bundles
					// but those of the node programs the image lacks, which
					// get the node's glibc by design.
					log := filepath.Join(run.host, name+".strace")
					execArgv := append([]string{run.work + "/dlbundle-amd64", "exec", "--stage-dir", stage, run.work + "/" + name, "--"}, argv...)
					if out, _, err := run.run(t, log, execArgv...); err != nil || out != native {
						t.Fatalf("warm exec under strace: %v, stdout %q", err, out)
					}
					check := leakCheck{links: imageLinks(t, filepath.Join(run.host, name)), nodeExec: map[string]bool{"/usr/bin/expr": true, "/usr/bin/env": true}}
					if n, report := leaksIn(t, log, bundledPaths(t, filepath.Join(run.host, name)), execArgv[0], check); n != 0 {
						t.Errorf("a warm exec made %d system calls on paths the image bundles:\n%s", n, strings.Join(report, "\n"))
					}
					// env: the printed command starts the image's ld.so, and runs.

					sh := `eval "$("$0" env --stage-dir "$1" "$2" -- "$3" -c "$4")" && exec "$@"`
					out, errOut, err = run.run(t, "", "/bin/sh", "-c", sh, run.work+"/dlbundle-amd64", stage, run.work+"/"+name, argv[0], argv[2])
					if err != nil || out != native {
						t.Fatalf("dlbundle env -- CMD, then exec \"$@\": %v\nstdout %q, native %q\nstderr:\n%s", err, out, native, errOut)
					}
					printed := run.must(t, run.work+"/dlbundle-amd64", "env", "--stage-dir", stage, run.work+"/"+name, "--", argv[0], "-c", "pass")
					if !strings.Contains(printed, "DLBUNDLE_EXE=/usr/bin/python3") || !regexp.MustCompile(`(?m)^set -- \S+/root/\S+/ld-\S+\.so\S* (--argv0 /usr/bin/python3 )?\S+/root/usr/bin/python3\S* -c pass$`).MatchString(printed) {
						t.Errorf("env -- CMD on a node with another glibc does not print the command under the image's ld.so:\n%s", printed)
					}
					// Plain env (no command) warns, and names the way that works.
					_, errOut, err = run.run(t, "", run.work+"/dlbundle-amd64", "env", "--stage-dir", stage, run.work+"/"+name)
					if err != nil || !strings.Contains(errOut, "warning") || !strings.Contains(errOut, "-- CMD") {
						t.Errorf("plain env on a node with another glibc (%v) does not warn or name `env IMG -- CMD`:\n%s", err, errOut)
					}
				})
			}
		})
	}
}

// optFile writes a file into /opt/<work>/ of the node (where the run nodes
// have nothing: the image must serve it) and returns its path there.
func (ch *chroot) optFile(t *testing.T, name, text string, mode os.FileMode) string {
	dir := "/opt/" + filepath.Base(ch.work)
	host := filepath.Join(ch.root, dir)
	if err := os.MkdirAll(host, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(host) })
	if err := os.WriteFile(filepath.Join(host, name), []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	return dir + "/" + name
}

// The scripts print the glibc they run with (getconf, a bundled program:
// the image's glibc as on the build node only if it ran under the image's
// ld.so) and their argv as the kernel gives a "#!" interpreter.
const shScript = `#!/bin/sh
echo "sh: $0 $#: $*"
getconf GNU_LIBC_VERSION
printf '%s\n' "$(expr 6 \* 7)"
`

const envPythonScript = `#!/usr/bin/env python3
import os, subprocess, sys
print("py", sys.argv, os.confstr("CS_GNU_LIBC_VERSION"))
print(subprocess.run(["getconf", "GNU_LIBC_VERSION"], capture_output=True, text=True).stdout, end="")
`

// systemC runs commands through system() and popen(), whose /bin/sh glibc
// starts with its internal posix_spawn (no wrapper sees it: the node's
// /bin/sh under the node's ld.so), and a bundled program through
// posix_spawnp (the shim's wrapper).
const systemC = `#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <gnu/libc-version.h>
extern char **environ;
int main(int argc, char **argv) {
	printf("main: glibc %s, %d args\n", gnu_get_libc_version(), argc);
	fflush(stdout);
	int rc = system("echo system: $0; getconf GNU_LIBC_VERSION; printf '%s\\n' via-printf");
	printf("system: status %d\n", rc);
	FILE *p = popen("getconf GNU_LIBC_VERSION; echo popen: sh", "r");
	char buf[256];
	while (p && fgets(buf, sizeof buf, p)) printf("popen: %s", buf);
	printf("pclose: status %d\n", p ? pclose(p) : -1);
	fflush(stdout);
	pid_t pid;
	char *av[] = {"getconf", "GNU_LIBC_VERSION", NULL};
	int st = -1;
	if (posix_spawnp(&pid, "getconf", NULL, NULL, av, environ) == 0) waitpid(pid, &st, 0);
	printf("posix_spawnp: status %d\n", st);
	return 0;
}
`

// TestCrossGlibcScripts: a "#!/bin/sh" script, a "#!/usr/bin/env python3"
// script, and a C program that runs commands through system(), popen() and
// posix_spawnp, each traced and built on one node and run with dlbundle
// exec on every other (6 pairs), print what they print natively on the
// build node; a warm exec makes no system call on a path the image bundles,
// also through the image's symlinks (/bin/sh), but for the /bin/sh that
// system() and popen() start with glibc's internal posix_spawn (the node's,
// with the node's glibc, by design).
// An image of a glibc before 2.34 needs its glibc's libdl.so.2 for the
// shim's preload object; the C program and the sh script (dash) do not load
// it themselves, so they fail on a newer node when the build leaves it out.
func TestCrossGlibcScripts(t *testing.T) {
	nodes := crossNodes(t)
	apps := []crossApp{
		{"sh-script", func(t *testing.T, build *chroot) []string {
			return []string{build.optFile(t, "script.sh", shScript, 0o755), "a", "b c"}
		}, nil},
		{"env-python-script", func(t *testing.T, build *chroot) []string {
			return []string{build.optFile(t, "script.py", envPythonScript, 0o755), "a", "b c"}
		}, nil},
		{"system-popen", func(t *testing.T, build *chroot) []string {
			src := build.optFile(t, "system.c", systemC, 0o644)
			prog := strings.TrimSuffix(src, ".c")
			build.must(t, "/usr/bin/gcc", "-O", "-o", prog, src)
			return []string{prog, "x"}
		}, []string{"/bin/sh"}},
	}
	crossPairs(t, nodes, apps)
}

// TestImageWithoutLibdlRefusedOnAnotherGlibc: an image of a glibc before
// 2.34 built without that glibc's libdl.so.2 (as dlbundle built them before
// it bundled it for the shim; here left out with --exclude) is refused on a
// node with another glibc, with one line that says what is missing and
// what to do, instead of every process dying before main.
func TestImageWithoutLibdlRefusedOnAnotherGlibc(t *testing.T) {
	nodes := crossNodes(t)
	var build, run *chroot
	for _, n := range nodes {
		switch n.name {
		case "bullseye-amd64":
			build = n
		case "host":
			run = n
		}
	}
	if build == nil || run == nil {
		t.Skip("needs the bullseye-amd64 chroot and this node")
	}
	script := build.optFile(t, "script.sh", shScript, 0o755)
	build.must(t, build.work+"/dlbundle-amd64", "trace", "-q", "-o", build.work+"/sh.trace", "--", script)
	libdl := build.must(t, "/usr/bin/readlink", "-f", "/lib/x86_64-linux-gnu/libdl.so.2")
	build.must(t, build.work+"/dlbundle-amd64", "build", "--exclude", strings.TrimSpace(libdl), "-o", build.work+"/sh.dlimg", build.work+"/sh.trace")
	data, err := os.ReadFile(filepath.Join(build.host, "sh.dlimg"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(run.host, "sh.dlimg"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := run.run(t, "", run.work+"/dlbundle-amd64", "exec", "--stage-dir", run.work+"/stage", run.work+"/sh.dlimg", "--", script)
	line := strings.TrimRight(errOut, "\n")
	if err == nil || out != "" || strings.Contains(line, "\n") ||
		!strings.Contains(line, "lacks its libdl.so.2") || !strings.Contains(line, "rebuild the image") || !strings.Contains(line, "--fallback") {
		t.Errorf("exec of a glibc 2.31 image without libdl.so.2 on glibc 2.36: %v, stdout %q, stderr (want one line saying so):\n%s", err, out, errOut)
	}
	t.Logf("the refusal: %s", line)
}

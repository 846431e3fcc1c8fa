package loader

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/treeimage"
)

// identityProbe prints what a program sees of a bundled file's identity
// through every way a program can reach it: stat of /proc/self/fd/N,
// fstat of a dup and of an fd numbered 1024 or more, stat of
// /proc/self/exe, the device and inode columns of /proc/self/maps for the
// executable, and fstat of an fd inherited by a child (argv[1] = "child FD").
const identityProbe = `#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
static void show(const char *what, int rc, const struct stat *st)
{
	if (rc) { printf("%s: error\n", what); return; }
	printf("%s: dev=%lu ino=%lu nlink=%lu size=%lld ctime=%lld.%09ld mtime=%lld\n", what, (unsigned long)st->st_dev,
	       (unsigned long)st->st_ino, (unsigned long)st->st_nlink, (long long)st->st_size, (long long)st->st_ctim.tv_sec,
	       st->st_ctim.tv_nsec, (long long)st->st_mtim.tv_sec);
}
int main(int argc, char **argv)
{
	struct stat st;
	if (argc == 3 && !strcmp(argv[1], "child")) {
		int fd = atoi(argv[2]);
		show("inherited fstat", fstat(fd, &st), &st);
		return 0;
	}
	int fd = open(argv[1], O_RDONLY);
	char l[64];
	snprintf(l, sizeof l, "/proc/self/fd/%d", fd);
	show("stat /proc/self/fd/N", stat(l, &st), &st);
	show("fstat", fstat(fd, &st), &st);
	show("fstat dup", fstat(dup(fd), &st), &st);
	show("fstat fd>=1024", fstat(fcntl(fd, F_DUPFD, 1500), &st), &st);
	show("stat /proc/self/exe", stat("/proc/self/exe", &st), &st);
	FILE *m = fopen("/proc/self/maps", "r");
	char line[8192];
	while (m && fgets(line, sizeof line, m)) {
		char dev[32];
		unsigned long ino;
		char path[4096];
		if (sscanf(line, "%*s %*s %*s %31s %lu %4095s", dev, &ino, path) == 3 && strstr(path, "/bin/identity"))
			printf("maps: %s %lu %s\n", dev, ino, path);
	}
	if (m) fclose(m);
	fflush(stdout);
	char fds[16];
	snprintf(fds, sizeof fds, "%d", fd);
	execl("/proc/self/exe", argv[0], "child", fds, (char *)NULL);
	return 1;
}
`

// probeTree compiles the C program src to root/tree/bin/name: a tree to
// bundle, with the probe in it.
func probeTree(t *testing.T, root, name, src string) (tree, bin string) {
	t.Helper()
	tree = filepath.Join(root, "tree")
	if err := os.MkdirAll(filepath.Join(tree, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := filepath.Join(root, name+".c")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(tree, "bin", name)
	if out, err := exec.Command("gcc", "-O1", "-o", bin, c).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return tree, bin
}

// entriesBelow is the entries of tree and what is below it, without its
// parent directories.
func entriesBelow(t *testing.T, tree string) []image.Entry {
	var entries []image.Entry
	for _, e := range treeimage.Entries(t, tree) {
		if e.Path == tree || strings.HasPrefix(e.Path, tree+"/") {
			entries = append(entries, e)
		}
	}
	return entries
}

// TestStagedCopyHidden: the staged copy does not
// show through: /proc/self/fd/N, /proc/self/exe, the maps columns, dups,
// fds of 1024 and more and inherited fds show the original's device, inode
// and times. On main 9f80a42 they showed the stage's.
func TestStagedCopyHidden(t *testing.T) {
	root := t.TempDir()
	T, bin := probeTree(t, root, "identity", identityProbe)
	data := filepath.Join(T, "data.txt")
	if err := os.WriteFile(data, []byte("data\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	futureAtimes(t, T)
	stage := stageEntries(t, root, entriesBelow(t, T))
	staged, ok := StagedPath(stage, bin)
	if !ok {
		t.Fatal("the probe is not bundled")
	}
	env := probeEnv(root)
	native := runProbe(t, "", []string{bin, data}, env)
	if !strings.Contains(native, "inherited fstat: dev=") || !strings.Contains(native, "maps: ") || strings.Contains(native, "error") {
		t.Fatalf("native run:\n%s", native)
	}
	shim := runProbe(t, staged, []string{bin, data}, ShimEnv(stage, env, EnvOptions{}))
	diffLines(t, "identity probe", native, shim)
}

// TestPosixSpawnScript: posix_spawn(p) of a bundled "#!"
// script starts its interpreter as the kernel would (the script's path as
// given in argv), so the script is read through the shim from the stage, as
// execve already did; on main 9f80a42 the kernel read it from the original
// file system.
func TestPosixSpawnScript(t *testing.T) {
	root := t.TempDir()
	tree := filepath.Join(root, "tree")
	if err := os.MkdirAll(filepath.Join(tree, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(tree, "bin", "hello.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh -e\necho \"$0\" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var entries []image.Entry
	for _, e := range treeimage.Entries(t, tree) {
		if e.Path == tree || strings.HasPrefix(e.Path, tree+"/") {
			entries = append(entries, e)
		}
	}
	stage := stageEntries(t, root, entries)
	code := `import os, sys
pid = os.posix_spawn(sys.argv[1], [sys.argv[1], 'a', 'b c'], os.environ)
os.waitpid(pid, 0)
os.environ['PATH'] = os.path.dirname(sys.argv[1]) + ':' + os.environ['PATH']
pid = os.posix_spawnp('hello.sh', ['hello.sh', 'p'], os.environ)
os.waitpid(pid, 0)
`
	base := []string{"PATH=/usr/bin:/bin", "HOME=/", "LANG=C.UTF-8"}
	argv := []string{"/usr/bin/python3", "-I", "-B", "-c", code, script}
	native, _ := straceTree(t, base, nil, tree, nil, argv...)
	want := script + " a b c\n" + script + " p\n"
	if native != want {
		t.Fatalf("natively: %q, want %q", native, want)
	}
	shim, calls := straceTree(t, ShimEnv(stage, base, EnvOptions{}), nil, tree, nil, argv...)
	if shim != native {
		t.Errorf("under the shim %q, natively %q", shim, native)
	}
	if len(calls) > 0 {
		t.Errorf("%d system calls on the bundled tree:\n%s", len(calls), strings.Join(calls, "\n"))
	}
}

func TestParseShebang(t *testing.T) {
	for in, want := range map[string][2]string{
		"#!/bin/sh\necho":                   {"/bin/sh", ""},
		"#! /usr/bin/env  python3 \n":       {"/usr/bin/env", "python3"},
		"#!/usr/bin/awk -f -v x=1\t\nBEGIN": {"/usr/bin/awk", "-f -v x=1"},
		"#!/bin/bash\t-e\n":                 {"/bin/bash", "-e"},
	} {
		interp, arg, ok := parseShebang([]byte(in))
		if !ok || interp != want[0] || arg != want[1] {
			t.Errorf("%q: got %q %q %v, want %q %q", in, interp, arg, ok, want[0], want[1])
		}
	}
	for _, in := range []string{"#!/bin/sh", "\x7fELF", "#!\n", "#!   \n", "echo\n"} {
		if _, _, ok := parseShebang([]byte(in)); ok {
			t.Errorf("%q: accepted", in)
		}
	}
}

func FuzzParseShebang(f *testing.F) {
	f.Add([]byte("#!/usr/bin/env python3\n"))
	f.Add([]byte("#!\t/bin/sh -e \t\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		interp, arg, ok := parseShebang(b)
		if !ok {
			return
		}
		if interp == "" || strings.ContainsAny(interp, " \t\n\x00") || strings.ContainsRune(arg, '\n') ||
			strings.TrimSpace(arg) != arg && strings.Trim(arg, " \t") != arg {
			t.Fatalf("%q: interp %q arg %q", b, interp, arg)
		}
	})
}

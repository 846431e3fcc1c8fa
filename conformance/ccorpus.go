package main

import (
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

//go:embed testdata/pathprobe.c
var pathprobeSource []byte

// cCorpus is libc's path functions (testdata/pathprobe.c) over a tree
// whose in/ is bundled and out/ is not, with symlinks across: built plain
// and with _FORTIFY_SOURCE=2 (the *_chk variants), run as root and as an
// unprivileged uid (EACCES).
func cCorpus() *Corpus {
	return &Corpus{
		Name: "c",
		What: "C probe of libc path functions (conformance/testdata/pathprobe.c): realpath (malloc'd and " +
			"caller's buffer), canonicalize_file_name, stat/lstat/fstatat, access/faccessat(AT_EACCESS), " +
			"readlink/readlinkat, open (+ fstat of the fd), open(O_DIRECTORY), fopen, opendir/readdir order with " +
			"d_type, scandir, nftw (4 flag sets), fts (4 flag sets), glob (3 flag sets), openat/fstatat chains " +
			"relative to dirfds, chdir+getcwd and relative paths; over a bundled tree (in/), an unbundled one " +
			"(out/), symlinks into and out of the image, `.`/`..`, ENOENT/ENOTDIR/ELOOP/ENAMETOOLONG/EACCES; " +
			"built -O0 and -O2 -D_FORTIFY_SOURCE=2 (__realpath_chk, __readlink_chk, __readlinkat_chk, " +
			"__getcwd_chk), run as root and as uid 1001. One line per call; a differing line is a divergence.",
		Setup:       setupCTree,
		NativeTwice: true, // /proc/self/exe's own inode and times differ per process
		Pilot: func(c *Ctx) Run {
			root := filepath.Join(c.Work, "ctree")
			return Run{Argv: []string{"/bin/sh", "-c", fmt.Sprintf("%[1]s/bin/pathprobe %[1]s >/dev/null; %[1]s/bin/pathprobe-fortify %[1]s >/dev/null", root)},
				Env: c.Env, Dir: "/"}
		},
		BuildArgs: func(c *Ctx) []string {
			root := filepath.Join(c.Work, "ctree")
			return []string{"--include", root, "--exclude", filepath.Join(root, "out")}
		},
		Runs: func(c *Ctx) []NamedRun {
			root := filepath.Join(c.Work, "ctree")
			var rs []NamedRun
			for _, uid := range []int{0, 1001} {
				for _, bin := range []string{"pathprobe", "pathprobe-fortify"} {
					rs = append(rs, NamedRun{Name: fmt.Sprintf("%s.uid%d", bin, uid),
						Run: Run{Argv: []string{filepath.Join(root, "bin", bin), root}, Env: c.Env, Dir: "/", UID: uid}})
				}
			}
			return rs
		},
		Parse: func(c *Ctx, nr NamedRun, out []byte) (Outcomes, error) {
			return ParseLines(strings.NewReader(string(out)))
		},
	}
}

// setupCTree writes the tree and compiles the probe into it.
func setupCTree(c *Ctx) error {
	root := filepath.Join(c.Work, "ctree")
	os.RemoveAll(root)
	for _, d := range []string{"bin", "in/sub/deep", "in/empty", "in/closed", "in/big", "out/odir"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	files := map[string]string{
		"in/file": "hello in\n", "in/sub/deep/leaf": "leaf\n", "in/noperm": "secret\n", "in/closed/inner": "inner\n",
		"in/exec.sh": "#!/bin/sh\necho hi\n", "out/ofile": "hello out\n", "out/odir/x": "x\n",
	}
	for rel, s := range files {
		if err := os.WriteFile(filepath.Join(root, rel), []byte(s), 0o644); err != nil {
			return err
		}
	}
	for i := 0; i < 300; i++ {
		if err := os.WriteFile(filepath.Join(root, "in/big", fmt.Sprintf("%03d-%x", i, i*7919%4096)), nil, 0o644); err != nil {
			return err
		}
	}
	links := map[string]string{
		"in/link-file": "file", "in/link-abs": filepath.Join(root, "in/file"), "in/link-dir": "sub", "in/link-out": "../out",
		"in/link-out-file": "../out/ofile", "in/dangling": "nowhere", "in/loop1": "loop2", "in/loop2": "loop1",
		"in/chain1": "chain2", "in/chain2": "chain3", "in/chain3": "file", "in/link-dotdot": "..",
		"out/link-in": "../in/sub", "out/link-in-file": "../in/file",
	}
	for rel, target := range links {
		if err := os.Symlink(target, filepath.Join(root, rel)); err != nil {
			return err
		}
	}
	if err := os.Link(filepath.Join(root, "in/file"), filepath.Join(root, "in/hard")); err != nil {
		return err
	}
	if err := syscall.Mkfifo(filepath.Join(root, "in/fifo"), 0o644); err != nil {
		return err
	}
	for rel, mode := range map[string]os.FileMode{"in/noperm": 0, "in/closed": 0o700, "in/exec.sh": 0o755} {
		if err := os.Chmod(filepath.Join(root, rel), mode); err != nil {
			return err
		}
	}
	src := filepath.Join(c.Work, "pathprobe.c")
	if err := os.WriteFile(src, pathprobeSource, 0o644); err != nil {
		return err
	}
	for bin, flags := range map[string][]string{"pathprobe": {"-O0"}, "pathprobe-fortify": {"-O2", "-D_FORTIFY_SOURCE=2"}} {
		args := append(append([]string{"-Wall"}, flags...), "-o", filepath.Join(root, "bin", bin), src)
		if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("gcc %v: %v\n%s", args, err, out)
		}
	}
	return nil
}

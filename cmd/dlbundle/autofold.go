package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/oneproc"
	"github.com/dlbundle/dlbundle/internal/outfile"
	"github.com/dlbundle/dlbundle/internal/trustpath"
	"github.com/dlbundle/dlbundle/node"
	"github.com/dlbundle/dlbundle/report"
)

// autoFoldVar: the Slurm plugin's --dlbundle=auto, once a step served from
// DIR/auto-<key>.dlimg has ended on a node (all its tasks there), runs
// dlbundle with DLBUNDLE_AUTO_FOLD=DIR/auto-<key> as the job's user: the
// node's records of that step are folded into the image, so that the next
// step of the command loads from the image what this one missed. The
// plugin starts it and does nothing else; every file is touched here.
const autoFoldVar = "DLBUNDLE_AUTO_FOLD"

// autoFold folds this node's records of the step (run slurm-<job>.<step>,
// in the stage dir the step's env used) into base.dlimg when they name
// something the image lacks. Every node of the step does the same with its
// own records, so the folds are serialised by a flock on base.lock in the
// auto dir: each one reads the image the previous one wrote, adds its
// node's misses and renames the result over it (build's output is a
// temporary file renamed when complete: a step that stages meanwhile gets
// the old image or the new one, never half). A node whose misses another
// node's fold already added folds nothing. Paths a fold was asked for and
// could not add (an output of the run, a path gone since) are noted in
// base.unfolded, so that they do not make every later step fold again.
// Exits 0 when done or when there was nothing to fold, else 1 with the
// cause on stderr (the plugin copies it into slurmd's log).
func autoFold(base string) {
	os.Unsetenv(autoFoldVar)
	oneproc.Restore()
	fail := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "dlbundle: --dlbundle=auto: folding this step's records into %s.dlimg: %s\n", base, fmt.Sprintf(format, a...))
		os.Exit(exitFailure)
	}
	if !strings.HasPrefix(base, "/") {
		fail("%s=%s is not an absolute path; set by the Slurm plugin's --dlbundle=auto only", autoFoldVar, base)
	}
	img := base + ".dlimg"
	files, rc, err := autoRecords(img)
	if err != nil {
		fail("%v", err)
	}
	if rc == nil {
		os.Exit(0) // no record: every process of the step was served entirely
	}
	defer rc.records.dir.Close()
	s, _, err := rc.summary()
	if err != nil {
		fail("%v", err)
	}
	wanted := foldWanted(s)
	if len(wanted) == 0 {
		os.Exit(0)
	}

	// One fold at a time, whichever node: the lock file is the user's own,
	// in the auto dir the first step made (walked by the rule of every
	// output, opened by name in the directory the walk trusted).
	last, err := trustpath.For(trustpath.Write).Walk(base + ".lock")
	if err != nil {
		fail("%v", err)
	}
	fd, err := unix.Openat(last.Dir.FD, last.Dir.Name(last.Name), unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	last.Close()
	if err != nil {
		fail("open %s.lock: %v", base, err)
	}
	for {
		if err = unix.Flock(fd, unix.LOCK_EX); err != unix.EINTR {
			break
		}
	}
	if err != nil {
		fail("lock %s.lock: %v", base, err)
	}
	defer unix.Close(fd) // drops the lock

	// Under the lock: the image as the last fold left it.
	unfolded := readUnfolded(base + ".unfolded")
	if pending := notIn(img, wanted, unfolded); len(pending) == 0 {
		os.Exit(0) // another node's fold added them
	}
	log, err := outfile.Create(base+".log", "build log", "--dlbundle=auto:DIR")
	if err != nil {
		fail("%v", err)
	}
	self, err := os.Executable()
	if err == nil {
		args := append([]string{"build", "-o", img, "--from", img}, files...)
		cmd := exec.Command(self, args...)
		cmd.Stdout, cmd.Stderr = log.File, log.File
		err = cmd.Run()
	}
	if err != nil {
		fmt.Fprintf(log, "dlbundle: --dlbundle=auto: folding %v into %s: %v; the image is as it was\n", files, img, err)
	}
	if cerr := log.Commit(outfile.Private()); cerr != nil {
		fmt.Fprintf(os.Stderr, "dlbundle: --dlbundle=auto: %v\n", cerr)
	}
	if err != nil {
		fail("%v (its messages: %s.log)", err, base)
	}
	// What the fold could not add (build left it out: an output of the
	// run, a path that no longer exists) is noted, so that it alone never
	// makes a later step fold again.
	if left := notIn(img, wanted, nil); len(left) > 0 {
		for p := range unfolded {
			left = append(left, p)
		}
		if out, err := outfile.Create(base+".unfolded", "note", "--dlbundle=auto:DIR"); err == nil {
			w := bufio.NewWriter(out)
			for _, p := range left {
				fmt.Fprintln(w, p)
			}
			w.Flush()
			if out.Commit(outfile.Private()) != nil {
				out.Discard()
			}
		}
	}
	fmt.Fprintf(os.Stderr, "folded this node's misses (%d paths) into %s\n", len(wanted), img)
	os.Exit(0)
}

// autoRecords finds this node's records of the step (the run id env gave
// the step's tasks, in the stage dir it staged in) that name img; rc nil
// when there are none.
func autoRecords(img string) (files []string, rc *ReportCmd, err error) {
	run := runID(os.Getenv, img, nil)
	rc = &ReportCmd{StageDir: os.Getenv(node.StageDirEnv), RunID: run, Image: img, out: io.Discard}
	if err := rc.nodeFiles(); err != nil {
		return nil, nil, nil // no records of this run here: nothing to fold
	}
	for _, g := range rc.byImage() {
		if g.image == img {
			files = g.files
		}
	}
	if len(files) == 0 {
		rc.records.dir.Close()
		return nil, nil, nil
	}
	rc.Files = files
	return files, rc, nil
}

// foldWanted are the paths a summary says the image lacked: the paths
// passed to the file system that the image could hold, and the libraries
// loaded from outside it.
func foldWanted(s report.Summary) []string {
	var out []string
	for _, l := range [][]report.PathCount{s.Lacked, s.Outside} {
		for _, p := range l {
			out = append(out, p.Path)
		}
	}
	return out
}

// notIn are the paths of wanted that the image at img has no entry for,
// other than those in skip.
func notIn(img string, wanted []string, skip map[string]bool) []string {
	im, err := image.OpenFile(img)
	if err != nil {
		return wanted
	}
	defer im.Close()
	var out []string
	for _, p := range wanted {
		if _, ok := im.Lookup(filepath.Clean(p)); !ok && !skip[p] {
			out = append(out, p)
		}
	}
	return out
}

// readUnfolded reads the note of paths earlier folds could not add.
func readUnfolded(p string) map[string]bool {
	set := map[string]bool{}
	f, _, err := trustpath.For(trustpath.Write).OpenOwn(p)
	if err != nil {
		return set
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 16<<20))
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	for sc.Scan() {
		if l := sc.Text(); l != "" {
			set[l] = true
		}
	}
	return set
}

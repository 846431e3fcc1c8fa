package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/dlbundle/dlbundle/node"
)

// BcastCmd is what the Slurm plugin runs in srun for --dlbundle-bcast: it
// copies the image to DEST on every node of the job with sbcast, once per
// job. The first step that asks copies and leaves a record in the stage dir
// of srun's host; a later step of the job that finds the record copies
// nothing (each node still has the copy, or the stage it made of it and
// its consumed record), so the shared file system is read once per job. It
// is not for people: the plugin chooses DEST (per job, user and image).
type BcastCmd struct {
	StageDir string `name:"stage-dir" env:"DLBUNDLE_STAGE_DIR"`
	Job      string `required:""`
	Sbcast   string `default:"sbcast"`
	Image    string `arg:""`
	Dest     string `arg:""`
}

// Run copies unless the job did.
func (c *BcastCmd) Run() error {
	if !filepath.IsAbs(c.Dest) {
		return fmt.Errorf("%s: give an absolute node-local path", c.Dest)
	}
	dir, _, err := node.OpenStageDirFor(c.StageDir)
	if err != nil {
		// No record can be kept on this host: every step copies.
		fmt.Fprintf(os.Stderr, "dlbundle: warning: --dlbundle-bcast: no record of the copy can be kept (%v); each step copies the image again\n", err)
		return c.sbcast()
	}
	// One step of the job copies at a time: a second that started
	// meanwhile (srun & srun &) waits and then finds the record, instead
	// of failing on the name the first one is writing.
	unlock, err := node.LockBroadcast(dir, c.Job)
	if err != nil {
		return err
	}
	defer unlock()
	if node.Broadcasted(dir, c.Job, c.Dest) {
		fmt.Fprintf(os.Stderr, "dlbundle: --dlbundle-bcast: job %s copied %s to its nodes already: not copied again\n", c.Job, c.Dest)
		return nil
	}
	if err := c.sbcast(); err != nil {
		return err
	}
	return node.RecordBroadcast(dir, c.Job, c.Dest)
}

// sbcast runs sbcast as this process's user: it creates DEST with O_EXCL
// on each node (a name someone took first fails the copy: it is never
// written through), and the nodes consume the copy only if it is the user's
// own regular file.
func (c *BcastCmd) sbcast() error {
	cmd := exec.Command(c.Sbcast, "--jobid="+c.Job, c.Image, c.Dest)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return fmt.Errorf("sbcast %s %s: %v", c.Image, c.Dest, err)
		}
		return fmt.Errorf("cannot run sbcast (is Slurm's sbcast in srun's PATH?): %w", err)
	}
	return nil
}

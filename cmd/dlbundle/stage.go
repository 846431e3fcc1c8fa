package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/dlbundle/dlbundle/image/registry"
	"github.com/dlbundle/dlbundle/node"
)

// StageCmd stages an image on this node without running anything: in a
// Prolog, or in a first `srun --ntasks-per-node=1` step.
type StageCmd struct {
	StageDir string `name:"stage-dir" placeholder:"DIR" env:"DLBUNDLE_STAGE_DIR" help:"Node-local directory for staged images, as for exec (patterns %u %U %j %n %h %t)."`
	Consume  bool   `help:"The image is a node-local copy (sbcast): remove it once staged, so the node keeps one copy; later execs in this job that name the same path find the stage."`
	Workers  int    `placeholder:"N" help:"Decompression workers (default: all cores)."`
	Insecure bool   `help:"With an oci:// image: plain http to the registry."`
	Quiet    bool   `short:"q" help:"Print nothing on success."`

	Image string `arg:"" name:"image" help:"The image: a file or an oci:// reference."`
}

// Help is shown by 'dlbundle stage --help'.
func (c *StageCmd) Help() string {
	return `Stages IMAGE into the node's stage dir exactly as the first rank of
'dlbundle exec' would (same lock, same stage), and exits. Use it to move the
image read and decompression out of the job's start-up:

  Prolog (as the job's user):     dlbundle stage /lustre/me/app.dlimg
  first step of a job script:     srun --ntasks-per-node=1 dlbundle stage /lustre/me/app.dlimg
  with sbcast (one read of the shared file system in all), into a directory
  of the job's own (others could plant a file at a name in /tmp they guess):
    D=/tmp/dlbundle-$SLURM_JOB_ID.$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')
    srun --ntasks-per-node=1 mkdir -m 0700 $D
    sbcast /lustre/me/app.dlimg $D/app.dlimg
    srun --ntasks-per-node=1 dlbundle stage --consume $D/app.dlimg
    srun dlbundle exec $D/app.dlimg -- ./myapp

An image path is trusted only where no other user could have prepared it:
nothing on the way that another user made in a directory every user can
write (/tmp, /dev/shm) - not the file, not a symlink, not a directory such as
a /tmp/jobs someone created first, whoever owns what is below it. Use a
directory you made (mkdir -m 0700 with a random name, as above). Within a
job, a path consumed by --consume is never read again.

See examples/jobs, docs/exec.md and docs/security.md.`
}

// Run stages the image.
func (c *StageCmd) Run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if c.Consume { // refuse before staging, not after
		if _, err := node.ConsumedKey(c.Image, os.Getenv); err != nil {
			return err
		}
	}
	s, err := ensureStage(ctx, "stage", node.EnsureRequest{StageDir: c.StageDir, Image: c.Image, Workers: c.Workers,
		Registry: registry.Options{Insecure: c.Insecure}})
	if err != nil {
		return err
	}
	if c.Consume {
		ref, err := node.AbsImageRef(c.Image)
		if err != nil {
			return err
		}
		removed, err := node.ConsumeImage(filepath.Dir(s.Dir), ref, s, os.Getenv)
		if err != nil {
			return err
		}
		if _, serr := os.Lstat(ref); !removed && serr == nil {
			fmt.Fprintf(os.Stderr, "dlbundle stage: warning: %s was consumed earlier in this job: the file now at that path was not read (within a job a consumed path names the image it named then); give another image another path\n", c.Image)
		}
	}
	if !c.Quiet {
		how := "already staged"
		if s.Materialized {
			how = "staged"
		}
		fmt.Printf("%s %s: %s\n", how, c.Image, s.Dir)
	}
	return nil
}

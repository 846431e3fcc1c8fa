package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/dlbundle/dlbundle/image/registry"
	"github.com/dlbundle/dlbundle/internal/stagetime"
	"github.com/dlbundle/dlbundle/node"
)

// StageCmd stages an image on this node without running anything: in a
// Prolog, or in a first `srun --ntasks-per-node=1` step.
type StageCmd struct {
	StageDir string `name:"stage-dir" placeholder:"DIR" env:"DLBUNDLE_STAGE_DIR" help:"Node-local directory for staged images, as for exec (patterns %u %U %j %n %h %t)."`
	Consume  bool   `help:"The image is a node-local copy (sbcast): remove it once staged, so the node keeps one copy; later execs in this job that name the same path find the stage."`
	Workers  int    `placeholder:"N" help:"Decompression workers (default: all cores)."`
	Insecure bool   `help:"With an oci:// image: plain http to the registry."`
	Quiet    bool   `short:"q" xor:"output" help:"Print nothing on success (not with --json)."`
	JSON     bool   `name:"json" xor:"output" help:"Print one JSON object on stdout instead of the line: the image, the stage dir (stage), the image's digest (digest, sha256:...) and whether this call made the stage or found it (made)."`
	User     string `placeholder:"USER" help:"As root: stage for this user (a name, a uid, or UID:GID when the uid has no passwd entry), into the user's stage dir, the stage the user's own dlbundle stage would make. Root only opens the stage dir and the image and publishes; a child running as the user (no_new_privs, clean environment) reads the image. In a Slurm Prolog (SLURM_SCRIPT_CONTEXT=prolog_slurmd) the default is the job's user (SLURM_JOB_UID:SLURM_JOB_GID)."`

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

As root, --user stages for another user without root reading a byte of the
image; in a Slurm Prolog (SLURM_SCRIPT_CONTEXT=prolog_slurmd) that user is
the job's (SLURM_JOB_UID, SLURM_JOB_GID) unless --user says otherwise:

  Prolog (root):                  dlbundle stage /lustre/me/app.dlimg
  root, for a user:               dlbundle stage --user alice /lustre/alice/app.dlimg

Root opens the user's stage dir and the image (walked by the trust rule as
the user) and hands both to a child that runs as the user with no_new_privs
and a clean environment; the child decodes the image into a temporary
directory of the user's, and root renames it into place. The stage is the
user's, as if the user had run 'dlbundle stage' (docs/security.md, "Root
parses nothing").

An image path is trusted only where no other user could have prepared it:
nothing on the way that another user made in a directory every user can
write (/tmp, /dev/shm) - not the file, not a symlink, not a directory such as
a /tmp/jobs someone created first, whoever owns what is below it. Use a
directory you made (mkdir -m 0700 with a random name, as above). Within a
job, a path consumed by --consume is never read again.

For a script, --json prints one object:

  dlbundle stage --json app.dlimg | jq -r .stage    # e.g. /dev/shm/dlbundle-1000/sha256-4665...

See examples/jobs, docs/exec.md and docs/security.md.`
}

// Run stages the image.
func (c *StageCmd) Run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if as, err := c.account(); err != nil {
		return err
	} else if as != nil {
		if c.Consume {
			return usageError{"--consume when root stages for another user (--user, or root in a Slurm Prolog): run 'dlbundle stage --consume' as the job's user (srun), who owns the record"}
		}
		s, err := node.StageFor(ctx, node.StageForRequest{User: *as, StageDir: c.StageDir, Image: c.Image,
			Workers: c.Workers, Insecure: c.Insecure})
		if err != nil {
			return err
		}
		return c.done(s)
	}
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
	return c.done(s)
}

func (c *StageCmd) done(s *node.Staged) error {
	stagetime.Report(os.Stderr) // DLBUNDLE_STAGE_TIMING=1
	if c.JSON {
		// A stage found through the job's alias was not read: its name is
		// the digest of the image it holds.
		digest := s.Digest
		if digest == "" {
			if hex, ok := strings.CutPrefix(filepath.Base(s.Dir), "sha256-"); ok {
				digest = "sha256:" + hex
			}
		}
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(struct {
			Image  string `json:"image"`
			Stage  string `json:"stage"`
			Digest string `json:"digest"`
			Made   bool   `json:"made"`
		}{c.Image, s.Dir, digest, s.Materialized})
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

// account is the user --user names when root stages for another user, or
// nil when the stage is the caller's own (no --user, or the caller's uid).
//
// Without --user, root in a Slurm Prolog (SLURM_SCRIPT_CONTEXT=prolog_slurmd,
// set by slurmd) stages for the job's user, SLURM_JOB_UID:SLURM_JOB_GID:
// a stage of root's own there is one no rank of the job would look in.
func (c *StageCmd) account() (*node.Account, error) {
	name := c.User
	if name == "" && os.Geteuid() == 0 && os.Getenv("SLURM_SCRIPT_CONTEXT") == "prolog_slurmd" && os.Getenv("SLURM_JOB_UID") != "" {
		name = os.Getenv("SLURM_JOB_UID")
		if gid := os.Getenv("SLURM_JOB_GID"); gid != "" {
			name += ":" + gid
		}
	}
	if name == "" {
		return nil, nil
	}
	a, err := lookupAccount(name)
	if err != nil {
		return nil, usageError{err.Error()}
	}
	switch {
	case a.Uid == os.Getuid() && a.Uid == os.Geteuid():
		return nil, nil // the user's own stage, as without --user
	case os.Geteuid() != 0:
		return nil, usageError{fmt.Sprintf("--user %s: only root stages for another user; run dlbundle stage as uid %d", name, a.Uid)}
	case a.Uid == 0:
		return nil, nil
	}
	return a, nil
}

// lookupAccount resolves --user: a name, a uid, or UID:GID.
func lookupAccount(s string) (*node.Account, error) {
	uidText, gidText, hasGid := strings.Cut(s, ":")
	var u *user.User
	var err error
	if _, nerr := strconv.Atoi(uidText); nerr == nil {
		u, err = user.LookupId(uidText)
	} else {
		u, err = user.Lookup(uidText)
	}
	a := &node.Account{}
	switch {
	case err == nil:
		a.Uid, _ = strconv.Atoi(u.Uid)
		a.Gid, _ = strconv.Atoi(u.Gid)
		if ids, err := u.GroupIds(); err == nil {
			for _, g := range ids {
				if n, err := strconv.Atoi(g); err == nil && n != a.Gid {
					a.Groups = append(a.Groups, n)
				}
			}
		}
	case !hasGid:
		return nil, fmt.Errorf("--user %s: no such user here (%v); give a name, or UID:GID for a uid without a passwd entry", s, err)
	default:
		n, nerr := strconv.Atoi(uidText)
		if nerr != nil || n < 0 {
			return nil, fmt.Errorf("--user %s: %s is no user name or uid here", s, uidText)
		}
		a.Uid = n
	}
	if hasGid {
		g, err := strconv.Atoi(gidText)
		if err != nil || g < 0 {
			return nil, fmt.Errorf("--user %s: %s is no numeric gid", s, gidText)
		}
		a.Gid = g
	}
	return a, nil
}

package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/dlbundle/dlbundle/image/registry"
	"github.com/dlbundle/dlbundle/internal/stagetime"
	"github.com/dlbundle/dlbundle/loader/stagefmt"
	"github.com/dlbundle/dlbundle/node/materialize"
)

// EnsureRequest says which image a process wants staged on this node, as
// the user gave it to a verb (exec, env, stage) or to a launcher plugin.
type EnsureRequest struct {
	// StageDir is --stage-dir or DLBUNDLE_STAGE_DIR as given (patterns
	// allowed); "" for the default.
	StageDir string
	// Image is a file path or an oci:// reference, as given.
	Image string
	// Workers bounds decompression (0: all cores).
	Workers int
	// Registry configures a pull (oci:// images only).
	Registry registry.Options
	// Getenv reads the launch's variables (job and step ids) for the alias;
	// nil: os.Getenv.
	Getenv func(string) string
	// Progress, if set, is given the bytes extracted so far and the total.
	Progress func(done, total int64)
	// OnWait, if set, is called once with the stage dir when another
	// process of the node holds the lock.
	OnWait func(stageDir string)
	// OnMiss, if set, is called once when no published stage is found
	// through the alias: this call will wait or stage (exec gives the Go
	// runtime its cores back there).
	OnMiss func()
	// Warn, if set, is given warnings meant for the user (a squatted stage
	// dir), said once per node and launch.
	Warn func(msg string)
}

// Ensure finds this node's published stage of the image, or makes it: the
// stage dir is opened under the trust rules (stagedir.go), the image is
// named by its alias (stagealias.go) so that later ranks of a launch never
// touch it, and staging happens once per node under the lock (Stage).
// Every way of starting a process from an image (exec, env, stage, the
// launcher plugins, which run `dlbundle env`) goes through here, so they
// find the same stage and fail with the same messages.
func Ensure(ctx context.Context, req EnsureRequest) (*Staged, error) {
	getenv := req.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	stop := stagetime.Start("stage dir: open and check")
	dir, squat, err := OpenStageDirFor(req.StageDir)
	stop()
	if err != nil {
		return nil, err
	}
	ref, err := AbsImageRef(req.Image)
	if err != nil {
		return nil, err
	}
	alias, err := StageAlias(ref, getenv)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", req.Image, err)
	}
	opts := materialize.Options{Workers: req.Workers, Progress: req.Progress}
	sreq := StageRequest{Dir: dir, Alias: alias, Ref: ref, MustHave: stagefmt.Essentials,
		Open: OpenImage(ref, dir, opts, req.Registry), OnMiss: req.OnMiss}
	if req.OnWait != nil {
		sreq.OnWait = func() { req.OnWait(dir) }
	}
	s, err := Stage(ctx, sreq)
	if err == nil && s.Materialized {
		// New content at an image path staged before (a rebuilt image):
		// its old stage goes once no process uses it (gc's rule). Best
		// effort: what stays is for a later gc.
		stop := stagetime.Start("retire the image's older stage")
		_, _ = RetireReplaced(ctx, dir, filepath.Base(s.Dir), ref)
		stop()
	}
	// A squatted stage dir: said once per node and launch, by the process
	// that looked at the image (the others found its stage by the alias).
	if squat != nil && req.Warn != nil && (err != nil || s.Digest != "") {
		req.Warn(squat.Warning())
	}
	return s, err
}

package main

import (
	"time"

	"github.com/dlbundle/dlbundle/image/registry"
	"github.com/dlbundle/dlbundle/node"
)

// StageFlags are the flags of the verbs that stage an image on this node
// for processes to run from (exec, env): one set, so that a job script can
// move a line from one verb to the other unchanged. Embedded in each verb
// (kong's embed; quickParse reads it in place too).
type StageFlags struct {
	StageDir string        `name:"stage-dir" placeholder:"DIR" env:"DLBUNDLE_STAGE_DIR" help:"Node-local directory for staged images (default /dev/shm/dlbundle-<uid> if /dev/shm is a tmpfs you can write, else $${TMPDIR:-/tmp}/dlbundle-<uid>; patterns %u user, %U uid, %j job id, %n node, %h host, %t $${TMPDIR:-/tmp}, %% a %). Must be yours and not group/world-writable."`
	Report   string        `placeholder:"FILE" help:"Every process served appends its lookup counts to FILE (sets DLBUNDLE_REPORT); summarise with 'dlbundle report FILE'. Default: the node's records beside the stage, which 'dlbundle report' reads with no file (DLBUNDLE_RECORD=0: none)."`
	Debug    bool          `help:"Log every lookup decision of the shim (sets DLBUNDLE_DEBUG=1)."`
	Fallback bool          `help:"If the image cannot be staged (corrupt, no space, refused stage dir), warn and let the app run natively instead of failing (exec runs it; env prints no variable)."`
	Workers  int           `placeholder:"N" help:"Decompression workers for staging (default: all cores)."`
	Insecure bool          `help:"With an oci:// image: talk plain http to the registry (a lab registry without TLS; localhost and 127.0.0.1 use http anyway)."`
	Timeout  time.Duration `default:"30s" placeholder:"DURATION" help:"With an oci:// image: give up on a registry connection that makes no progress for this long (transient failures are retried 3 times). The processes waiting on the node get the staging one's error at once."`
}

// checkInputs refuses a report file or debug directory the shim could not
// write, before anything is staged, and makes --report absolute (the app
// may change directory).
func (f *StageFlags) checkInputs() error {
	if f.Report != "" {
		resolved, err := checkReportFile(f.Report)
		if err != nil {
			return err
		}
		f.Report = resolved
	}
	return checkDebugDir(f.Debug)
}

// ensureRequest is what the verb asks of node.Ensure for image.
func (f *StageFlags) ensureRequest(image string) node.EnsureRequest {
	return node.EnsureRequest{StageDir: f.StageDir, Image: image, Workers: f.Workers,
		Registry: registry.Options{Insecure: f.Insecure, Timeout: f.Timeout}}
}

package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/dlbundle/dlbundle/internal/units"
	"github.com/dlbundle/dlbundle/node"
)

// GcCmd removes stages no running process uses.
type GcCmd struct {
	StageDir  string        `name:"stage-dir" placeholder:"DIR" env:"DLBUNDLE_STAGE_DIR" help:"Stage directory (default as for exec)."`
	Job       string        `placeholder:"ID" help:"Also remove the aliases written inside batch job ID (an Epilog: --job $$SLURM_JOB_ID)."`
	Keep      string        `placeholder:"SIZE" default:"0" help:"Keep unused stages, most recently used first, up to SIZE in total (e.g. 4G)."`
	OlderThan time.Duration `name:"older-than" placeholder:"DURATION" help:"Remove only stages unused for this long (e.g. 24h)."`
	Grace     time.Duration `default:"1m" help:"Never remove a stage used this recently (a rank may be about to start from it); at least 2s."`
	DryRun    bool          `name:"dry-run" help:"Say what would be removed; remove nothing."`
}

// Help is shown by 'dlbundle gc --help'.
func (c *GcCmd) Help() string {
	return `Removes the stages of this node's stage dir that no running process uses
(none maps a file of it or runs with it as DLBUNDLE_STAGE), and the aliases of
a finished job (--job) or of removed stages. It holds the stage lock, so an
exec waits rather than staging meanwhile. Stages in use are never removed.

  Epilog (as the job's user):  dlbundle gc --job "$SLURM_JOB_ID" --keep 4G
  by hand:                     dlbundle gc --older-than 24h --dry-run`
}

// Run removes what may be removed.
func (c *GcCmd) Run() error {
	keep, err := parseSize(c.Keep)
	if err != nil {
		return err
	}
	dir, squat, err := node.OpenStageDirFor(c.StageDir)
	if err != nil {
		return err
	}
	if squat != nil {
		fmt.Fprintf(os.Stderr, "dlbundle gc: warning: %s\n", squat.Warning())
	}
	res, err := node.GC(context.Background(), dir, node.GCOptions{Job: c.Job, Keep: keep, OlderThan: c.OlderThan, Grace: c.Grace, DryRun: c.DryRun})
	if err != nil {
		return err
	}
	verb := "removed"
	if c.DryRun {
		verb = "would remove"
	}
	for _, s := range res.Stages {
		fmt.Printf("%s %s (%s, last used %s)\n", verb, s.Name, units.Bytes(s.Size), s.LastUse.Format(time.DateTime))
	}
	fmt.Printf("%s %d stages (%s) and %d aliases; kept %d unused, %d in use\n",
		verb, len(res.Stages), units.Bytes(res.Freed), res.Aliases, len(res.Kept), len(res.InUse))
	return nil
}

// parseSize reads 4G, 512M, 100k or a number of bytes (binary units).
func parseSize(s string) (int64, error) {
	var n float64
	var unit string
	if _, err := fmt.Sscanf(s, "%g%s", &n, &unit); err != nil {
		if _, err := fmt.Sscanf(s, "%g", &n); err != nil {
			return 0, fmt.Errorf("size %q: want a number with an optional unit K, M, G, T (e.g. 4G)", s)
		}
	}
	mult := map[string]float64{"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20, "MIB": 1 << 20,
		"G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30, "T": 1 << 40, "TB": 1 << 40, "TIB": 1 << 40}
	m, ok := mult[upper(unit)]
	if !ok || n < 0 {
		return 0, fmt.Errorf("size %q: want a number with an optional unit K, M, G, T (e.g. 4G)", s)
	}
	return int64(n * m), nil
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'z' {
			b[i] = c - 32
		}
	}
	return string(b)
}

package main

import (
	"context"
	"fmt"
	"os"
	"strings"
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
	Stage     string        `placeholder:"STAGE" help:"Remove only this stage: its name from 'dlbundle ls' (sha256-..., a unique prefix of 8 or more characters will do). Still never one in use or used within --grace."`
}

// Help is shown by 'dlbundle gc --help'.
func (c *GcCmd) Help() string {
	return `Removes the stages of this node's stage dir that no running process uses
(none maps a file of it or runs with it as DLBUNDLE_STAGE), and the aliases of
a finished job (--job) or of removed stages. It holds the stage lock, so an
exec waits rather than staging meanwhile. Stages in use are never removed.

  Epilog (as the job's user):  dlbundle gc --job "$SLURM_JOB_ID" --keep 4G
  by hand:                     dlbundle gc --older-than 24h --dry-run
  one stage:                   dlbundle gc --stage sha256-4665e2ba2a3d

Each stage kept is listed with the reason: in use (by which processes), used
within --grace, within --older-than, or within the --keep budget.`
}

// Run removes what may be removed.
func (c *GcCmd) Run() error {
	keep, err := parseSize(c.Keep)
	if err != nil {
		return usageError{"--keep " + err.Error()} // a wrong value: nothing was done
	}
	dir, squat, err := node.OpenStageDirFor(c.StageDir)
	if err != nil {
		return err
	}
	if squat != nil {
		fmt.Fprintf(os.Stderr, "dlbundle gc: warning: %s\n", squat.Warning())
	}
	only := ""
	if c.Stage != "" {
		if only, err = findStage(dir, c.Stage); err != nil {
			return err
		}
	}
	opts := node.GCOptions{Job: c.Job, Keep: keep, OlderThan: c.OlderThan, Grace: c.Grace, DryRun: c.DryRun, Only: only}
	now := time.Now()
	res, err := node.GC(context.Background(), dir, opts)
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
	for _, s := range res.InUse {
		fmt.Printf("kept %s (%s): in use by %d processes (pid %s)\n", s.Name, units.Bytes(s.Size), len(s.InUse), pids(s.InUse, 5))
	}
	for _, s := range res.Kept {
		fmt.Printf("kept %s (%s): %s\n", s.Name, units.Bytes(s.Size), keptReason(s, opts, now))
	}
	fmt.Printf("%s %d stages (%s) and %d aliases; kept %d unused, %d in use\n",
		verb, len(res.Stages), units.Bytes(res.Freed), res.Aliases, len(res.Kept), len(res.InUse))
	if c.Job != "" && !c.DryRun {
		// The job's --dlbundle-bcast copies on a node where no step used them.
		if n, err := node.RemoveBcastCopies(c.Job); err != nil {
			fmt.Fprintf(os.Stderr, "dlbundle gc: warning: the job's --dlbundle-bcast copies in %s: %v\n", node.BcastCopyDir, err)
		} else if n > 0 {
			fmt.Printf("removed %d copies of the job's image that sbcast left in %s (--dlbundle-bcast) and no step used\n", n, node.BcastCopyDir)
		}
	}
	if c.Stage != "" && len(res.Stages) == 0 {
		return fmt.Errorf("stage %s was not removed (see above)", only)
	}
	return nil
}

// keptReason says why gc kept the unused stage s, by the rules of node.GC in
// its order: grace, --older-than, --keep; otherwise it was used while gc
// removed it (put back).
func keptReason(s node.StageInfo, o node.GCOptions, now time.Time) string {
	age := now.Sub(s.LastUse).Round(time.Second)
	switch grace := max(o.Grace, node.MinGrace); {
	case age < grace:
		return fmt.Sprintf("used %s ago, within --grace %s (a rank may be about to start from it)", age, grace)
	case o.OlderThan > 0 && age < o.OlderThan:
		return fmt.Sprintf("used %s ago, within --older-than %s", age, o.OlderThan)
	case o.Keep > 0:
		return fmt.Sprintf("within --keep %s (most recently used first)", units.Bytes(o.Keep))
	}
	return "used while gc was removing it (put back)"
}

// findStage is the stage of dir named by name or a unique prefix of it (at
// least 8 characters, "sha256-" optional).
func findStage(dir, name string) (string, error) {
	stages, err := node.ListStages(dir)
	if err != nil {
		return "", err
	}
	want := name
	if !strings.HasPrefix(want, "sha256-") {
		want = "sha256-" + strings.TrimPrefix(want, "sha256:")
	}
	var found []string
	for _, s := range stages {
		if s.Name == want || len(want) >= len("sha256-")+8 && strings.HasPrefix(s.Name, want) {
			found = append(found, s.Name)
		}
	}
	switch len(found) {
	case 0:
		return "", usageError{fmt.Sprintf("no stage %s in %s (names as 'dlbundle ls' shows them, at least 8 hex digits)", name, dir)}
	case 1:
		return found[0], nil
	}
	return "", usageError{fmt.Sprintf("--stage %s matches %d stages in %s; give more of its name", name, len(found), dir)}
}

// pids lists up to n of ps.
func pids(ps []int, n int) string {
	var b strings.Builder
	for i, p := range ps {
		if i == n {
			b.WriteString(" ...")
			break
		}
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprint(&b, p)
	}
	return b.String()
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

package main

import (
	"fmt"
	"os"
	"time"

	"github.com/dlbundle/dlbundle/internal/units"
	"github.com/dlbundle/dlbundle/node"
)

// LsCmd lists the node's stages.
type LsCmd struct {
	StageDir string `name:"stage-dir" placeholder:"DIR" env:"DLBUNDLE_STAGE_DIR" help:"Stage directory (default as for exec)."`
}

// Run lists the stages, most recently used first.
func (c *LsCmd) Run() error {
	// Listing creates nothing: not the stage dir, its parents, nor a
	// fallback for a squatted name.
	dir, squat, found, err := node.LookupStageDirFor(c.StageDir)
	if err != nil {
		return err
	}
	if squat != nil && squat.Fallback != "" {
		fmt.Fprintf(os.Stderr, "dlbundle ls: warning: %s\n", squat.Warning())
	}
	if !found {
		fmt.Printf("0 stages: no stage dir at %s yet (dlbundle exec or stage creates it)\n", dir)
		return nil
	}
	stages, err := node.ListStages(dir)
	if err != nil {
		return err
	}
	var total int64
	fmt.Printf("%-16s %10s  %-20s %s\n", "STAGE", "SIZE", "LAST USE", "IN USE BY")
	for _, s := range stages {
		total += s.Size
		use := "-"
		if len(s.InUse) > 0 {
			use = fmt.Sprintf("%d processes (pid %d ...)", len(s.InUse), s.InUse[0])
		}
		fmt.Printf("%-16.16s %10s  %-20s %s\n", s.Name, units.Bytes(s.Size), s.LastUse.Format(time.DateTime), use)
	}
	fmt.Fprintf(os.Stdout, "%d stages, %s in %s\n", len(stages), units.Bytes(total), dir)
	return nil
}

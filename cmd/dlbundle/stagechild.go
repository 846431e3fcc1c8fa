package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/dlbundle/dlbundle/node"
)

// StageChildCmd is the child root's 'stage --user' runs as the user
// (node.StageFor): it reads the image root handed over (fd 3) and writes the
// stage into the temporary directory root made; it is not for people.
type StageChildCmd struct {
	StageDir string `name:"stage-dir" required:""`
	Tmp      string
	Remove   bool
	Ensure   bool
	Alias    string
	Ref      string
	Workers  int
	Insecure bool
}

// Run is the child's whole life (node.RunStageChild).
func (c *StageChildCmd) Run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return node.RunStageChild(ctx, node.StageChildRequest{StageDir: c.StageDir, Tmp: c.Tmp, Remove: c.Remove, Ensure: c.Ensure, Alias: c.Alias,
		Ref: c.Ref, Workers: c.Workers, Insecure: c.Insecure}, os.Stdout)
}

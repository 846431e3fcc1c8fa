// Command slowfs mounts a directory through slowfs, a contended shared file
// system (one metadata queue with a service time, data cost per MiB, no
// kernel caching), for experiments by hand:
//
//	slowfs mount --service 200us --control /tmp/slowfs.sock SRC MNT   # until Ctrl-C
//	slowfs stats /tmp/slowfs.sock                                      # counts so far
//	slowfs reset /tmp/slowfs.sock                                      # zero them
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/alecthomas/kong"
	"github.com/dlbundle/dlbundle/internal/slowfs"
)

type mountCmd struct {
	Source     string        `arg:"" type:"existingdir" help:"Directory to serve."`
	Mountpoint string        `arg:"" type:"existingdir" help:"Where to mount it."`
	Service    time.Duration `default:"200us" help:"Service time of every metadata operation (lookup, getattr, open, opendir, readdir, readlink), served one at a time."`
	ReadPerMib time.Duration `name:"read-per-mib" default:"1ms" help:"Cost of one MiB of file data (one shared data path)."`
	Control    string        `placeholder:"SOCKET" help:"Unix socket answering 'slowfs stats' and 'slowfs reset'."`
}

func (c *mountCmd) Run() error {
	f, err := slowfs.Mount(c.Source, c.Mountpoint, slowfs.Costs{Metadata: c.Service, ReadPerMiB: c.ReadPerMib})
	if err != nil {
		return err
	}
	if c.Control != "" {
		l, err := f.ServeControl(c.Control)
		if err != nil {
			_ = f.Unmount()
			return err
		}
		defer os.Remove(c.Control)
		defer l.Close()
	}
	fmt.Fprintf(os.Stderr, "slowfs: serving %s at %s (metadata %v/op, data %v/MiB); Ctrl-C to unmount\n",
		c.Source, c.Mountpoint, c.Service, c.ReadPerMib)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	err = f.Unmount()
	fmt.Fprintf(os.Stderr, "slowfs: unmounted; %v\n", f.Stats())
	return err
}

type statsCmd struct {
	Socket string `arg:"" help:"Control socket given to 'slowfs mount --control'."`
}

func (c *statsCmd) Run() error { return query(c.Socket, "stats") }

type resetCmd struct {
	Socket string `arg:"" help:"Control socket given to 'slowfs mount --control'."`
}

func (c *resetCmd) Run() error { return query(c.Socket, "reset") }

func query(socket, command string) error {
	s, err := slowfs.QueryControl(socket, command)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

type cli struct {
	Mount mountCmd `cmd:"" help:"Serve SOURCE at MOUNTPOINT until interrupted; print the counts at unmount."`
	Stats statsCmd `cmd:"" help:"Print the counts of a mounted slowfs (JSON)."`
	Reset resetCmd `cmd:"" help:"Print the counts of a mounted slowfs and zero them."`
}

func main() {
	var c cli
	ctx := kong.Parse(&c, kong.Description("A contended shared file system for start-up benchmarks: a FUSE passthrough whose metadata operations queue on one server."))
	ctx.FatalIfErrorf(ctx.Run())
}

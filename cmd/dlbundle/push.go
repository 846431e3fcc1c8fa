package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dlbundle/dlbundle/image/registry"
)

// RegistryFlags are the flags shared by the verbs that talk to a registry.
type RegistryFlags struct {
	Insecure bool          `help:"Talk plain http to the registry (a lab registry without TLS). Registries on localhost, 127.0.0.1 and private addresses use http anyway."`
	Timeout  time.Duration `default:"30s" help:"Give up on a registry connection that makes no progress for this long (connects are capped at 10s); transient failures are retried 3 times."`
	Quiet    bool          `short:"q" help:"No progress bar."`
}

// options returns the registry options and the progress bar they draw (nil
// with --quiet or off a terminal).
func (f RegistryFlags) options(label string) (registry.Options, *progressBar) {
	var bar *progressBar
	if !f.Quiet {
		bar = newProgress(label)
	}
	return registry.Options{Insecure: f.Insecure, Timeout: f.Timeout, Progress: bar.callback()}, bar
}

// PushCmd uploads an image to an OCI registry.
type PushCmd struct {
	RegistryFlags
	Image string `arg:"" type:"existingfile" help:"The image file (app.dlimg) to push."`
	Ref   string `arg:"" help:"Where to push it: [oci://]REGISTRY/REPO:TAG, e.g. registry.example.org:5000/apps/myapp:v1."`
}

// Help is shown by 'dlbundle push --help' below the flags.
func (c *PushCmd) Help() string {
	return `The image becomes an OCI 1.1 artifact (artifactType
application/vnd.dlbundle.artifact.v1, one layer: the .dlimg file byte for
byte); any OCI registry stores it (Harbor, Quay, Zot, GitLab, GHCR, distribution).
Credentials come from 'docker login' / 'podman login' (~/.docker/config.json,
credential helpers, $REGISTRY_AUTH_FILE).

  dlbundle push app.dlimg registry.example.org/hpc/myapp:v1
  srun dlbundle exec oci://registry.example.org/hpc/myapp:v1 -- ./myapp

The pinned reference (REPO@sha256:...) is printed on stdout: jobs that use it
run exactly this image even if the tag moves later.`
}

// Run pushes the image and prints its pinned reference.
func (c *PushCmd) Run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts, bar := c.options("uploading " + c.Image)
	d, err := registry.Push(ctx, c.Image, c.Ref, opts)
	bar.finish()
	if err != nil {
		return err
	}
	pinned, err := registry.Pin(c.Ref, d)
	if err != nil {
		return err
	}
	fmt.Println(registry.Scheme + pinned)
	return nil
}

package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/image/registry"
)

// RegistryFlags are the flags shared by the verbs that talk to a registry.
type RegistryFlags struct {
	Insecure bool          `help:"Talk plain http to the registry (a lab registry without TLS). Registries on localhost, 127.0.0.1 and private addresses use http anyway."`
	Timeout  time.Duration `default:"30s" help:"Give up on a registry connection that makes no progress for this long (connects are capped at 10s); transient failures are retried 3 times."`
	Quiet    bool          `short:"q" help:"No progress bar."`
}

func (f RegistryFlags) options(label string) registry.Options {
	o := registry.Options{Insecure: f.Insecure, Timeout: f.Timeout}
	if !f.Quiet && isTerminal(os.Stderr) {
		o.Progress = newProgressBar(label).update
	}
	return o
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
	opts := c.options("push " + c.Image)
	d, err := registry.Push(ctx, c.Image, c.Ref, opts)
	finishProgress(opts)
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

// progressBar draws one self-overwriting line on stderr, at most 10 times
// a second.
type progressBar struct {
	label string
	start time.Time
	last  time.Time
	drawn bool
}

func newProgressBar(label string) *progressBar {
	return &progressBar{label: label, start: time.Now()}
}

func (p *progressBar) update(done, total int64) {
	now := time.Now()
	if done < total && now.Sub(p.last) < 100*time.Millisecond {
		return
	}
	p.last, p.drawn = now, true
	pct := 100.0
	if total > 0 {
		pct = 100 * float64(done) / float64(total)
	}
	const width = 30
	n := int(pct / 100 * width)
	rate := float64(done) / max(now.Sub(p.start).Seconds(), 1e-3)
	fmt.Fprintf(os.Stderr, "\r%s [%s%s] %s / %s %3.0f%% %s/s \x1b[K", p.label,
		strings.Repeat("=", n), strings.Repeat(" ", width-n), mib(float64(done)), mib(float64(total)), pct, mib(rate))
}

// finishProgress ends the progress line, if one was drawn.
func finishProgress(o registry.Options) {
	if o.Progress != nil {
		fmt.Fprintln(os.Stderr)
	}
}

func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

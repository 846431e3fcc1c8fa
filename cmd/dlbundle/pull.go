package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/dlbundle/dlbundle/image/registry"
	"github.com/dlbundle/dlbundle/internal/outfile"
)

// PullCmd downloads an image from an OCI registry.
type PullCmd struct {
	RegistryFlags
	Ref    string `arg:"" help:"The image: [oci://]REGISTRY/REPO:TAG or [oci://]REGISTRY/REPO@sha256:DIGEST."`
	Output string `short:"o" placeholder:"FILE" help:"Where to write the image; a directory gets the default name (default: the last part of REPO + .dlimg, in the current directory)."`
}

// Help is shown by 'dlbundle pull --help' below the flags.
func (c *PullCmd) Help() string {
	return `The download is streamed to a temporary file next to FILE and renamed to FILE
only when its sha256 matches the registry's manifest: FILE is never partial.
Only artifacts pushed by 'dlbundle push' are accepted. The image's size, as the
manifest declares it, is checked against the free space there before anything
is downloaded, and a download slower than 64 KiB/s over a --timeout window is
abandoned (a trickling registry would otherwise hold a node's stage lock).

  dlbundle pull registry.example.org/hpc/myapp:v1 -o /lustre/me/myapp.dlimg

'dlbundle exec oci://...' pulls by itself, once per node; pull is for copying
an image to a file system or inspecting it offline. The manifest digest is
printed on stdout.`
}

// Run pulls the image and prints the manifest digest.
func (c *PullCmd) Run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out := c.Output
	if out == "" {
		out = defaultPullName(c.Ref)
	} else if fi, err := os.Stat(out); err == nil && fi.IsDir() {
		out = filepath.Join(out, defaultPullName(c.Ref))
	}
	// The download is renamed over out: never over a device (-o /dev/null
	// as root made it a regular file), another user's file, or through
	// another user's directory in /tmp (package outfile's rules).
	if err := outfile.CheckReplace(out, "image", "-o"); err != nil {
		return err
	}
	opts, bar := c.options("downloading " + out)
	d, err := registry.Fetch(ctx, c.Ref, out, opts)
	bar.finish()
	if err != nil {
		return err
	}
	fmt.Println(d)
	return nil
}

// defaultPullName is REPO's last part + ".dlimg": reg/apps/myapp:v1 -> myapp.dlimg.
func defaultPullName(ref string) string {
	s := strings.TrimPrefix(ref, registry.Scheme)
	s, _, _ = strings.Cut(s, "@")
	base := path.Base(s)
	if i := strings.LastIndex(base, ":"); i > 0 {
		base = base[:i]
	}
	return base + ".dlimg"
}

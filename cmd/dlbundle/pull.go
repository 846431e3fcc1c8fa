package main

import (
	"context"
	"fmt"
	"io"
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
A character device or FIFO (-o /dev/null, -o /dev/stdout) gets the image once
it is verified, downloaded first to a private directory in $TMPDIR.
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
	if fi, err := os.Stat(out); err == nil && (fi.Mode()&os.ModeCharDevice != 0 || fi.Mode()&os.ModeNamedPipe != 0) {
		return c.pullToStream(ctx, out)
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

// pullToStream pulls into a character device or FIFO (-o /dev/null,
// -o /dev/stdout, a pipe to another program), which a download cannot be
// renamed over and which cannot be rewound for a retry: the image is
// downloaded and verified in a private temporary directory, then copied to
// out, so that nothing unverified reaches it. out is opened first, by
// outfile's rules (walked by the trust rule; a FIFO that no process reads
// is refused before anything is downloaded).
func (c *PullCmd) pullToStream(ctx context.Context, out string) error {
	f, err := outfile.Create(out, "image", "-o")
	if err != nil {
		return err
	}
	defer f.Discard()
	if !f.Direct() {
		return fmt.Errorf("-o %s changed while it was opened (no longer a device or FIFO); try again", out)
	}
	tmp, err := os.MkdirTemp("", "dlbundle-pull-")
	if err != nil {
		return fmt.Errorf("a temporary directory for the download to %s: %w; set TMPDIR to a writable directory", out, err)
	}
	defer os.RemoveAll(tmp)
	p := filepath.Join(tmp, "image.dlimg")
	opts, bar := c.options("downloading " + out)
	d, err := registry.Fetch(ctx, c.Ref, p, opts)
	bar.finish()
	if err != nil {
		return err
	}
	src, err := os.Open(p)
	if err != nil {
		return err
	}
	defer src.Close()
	if _, err := io.Copy(f, src); err != nil {
		return fmt.Errorf("writing the image to %s: %w", out, err)
	}
	if err := f.Commit(0); err != nil {
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

package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/units"
)

// ExtractCmd materialises an image's tree in a directory.
type ExtractCmd struct {
	Image   string `arg:"" type:"existingfile" help:"Image file (.dlimg)."`
	Dir     string `arg:"" type:"path" help:"Directory to create the tree in; must not exist, or be empty and yours."`
	Workers int    `default:"0" help:"Parallel decompressors (0 = all cores)."`
}

// Help is shown by `dlbundle extract --help`.
func (c *ExtractCmd) Help() string {
	return `Recreates the bundled tree under DIR: each path P of the image becomes DIR/P,
with its mode and mtime (setuid/setgid bits are dropped). Every object's
SHA-256 is checked; on any error everything created is removed again.

  dlbundle extract app.dlimg /tmp/app-tree
  ls /tmp/app-tree/usr/lib/python3.11

Nothing is written outside DIR: names are checked when the image is opened,
and symlinks are rewritten to relative targets that resolve inside DIR
(/lib -> /usr/lib becomes DIR/lib -> usr/lib). Paths recorded as missing or
external create nothing. DIR may be in a directory other users can write
(/tmp): everything is created relative to directories extract opened itself,
so that another user renaming or replacing them makes extract fail, never
write elsewhere. An existing DIR must be yours (root extracting into another
user's directory is refused), and a symlink on the way to DIR is followed
only if it is root's or yours.

The same tree comes out of standard tools, without the checks:
  zstd -dc app.dlimg | cpio -idm --no-absolute-filenames
(without that flag, GNU cpio writes a member named /x or ../x where it says:
extract and exec refuse such an image, plain cpio does not).`
}

// Run extracts the image.
func (c *ExtractCmd) Run() error {
	im, err := image.OpenFile(c.Image)
	if err != nil {
		return err
	}
	defer im.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := image.ExtractOptions{Workers: c.Workers}
	bar := newProgress("extracting")
	opts.Progress = bar.callback()
	start := time.Now()
	err = im.Extract(ctx, c.Dir, opts)
	bar.finish()
	if err != nil {
		return fmt.Errorf("extracting %s into %s: %w (nothing was left behind)", c.Image, c.Dir, err)
	}
	var files, links int
	var bytes int64
	for _, e := range im.Entries() {
		switch e.Type {
		case image.TypeRegular:
			files++
			bytes += e.Size
		case image.TypeSymlink:
			links++
		}
	}
	fmt.Printf("extracted %d files (%s) and %d symlinks into %s in %.2fs\n",
		files, units.Bytes(bytes), links, c.Dir, time.Since(start).Seconds())
	return nil
}

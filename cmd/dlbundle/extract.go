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

	"github.com/dlbundle/dlbundle/image"
)

// ExtractCmd materialises an image's tree in a directory.
type ExtractCmd struct {
	Image   string `arg:"" type:"existingfile" help:"Image file (.dlimg)."`
	Dir     string `arg:"" type:"path" help:"Directory to create the tree in; must not exist or be empty."`
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
external create nothing.

The same tree comes out of standard tools, without the checks:
  zstd -dc app.dlimg | cpio -idm`
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
	var bar *imgProgress
	if imgIsTerminal(os.Stderr) {
		bar = &imgProgress{label: "extracting", start: time.Now()}
		opts.Progress = bar.update
	}
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
		files, imgBytes(bytes), links, c.Dir, time.Since(start).Seconds())
	return nil
}

// imgProgress redraws one line on stderr at most 10 times a second. A nil
// *imgProgress does nothing (not a terminal).
type imgProgress struct {
	label       string
	start, last time.Time
	drawn       bool
}

func (p *imgProgress) update(done, total int64) {
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
	n := min(int(pct/100*width), width)
	rate := float64(done) / max(now.Sub(p.start).Seconds(), 1e-3)
	fmt.Fprintf(os.Stderr, "\r%s [%s%s] %s / %s %3.0f%% %s/s \x1b[K", p.label,
		strings.Repeat("=", n), strings.Repeat(" ", width-n), imgBytes(done), imgBytes(total), pct, imgBytes(int64(rate)))
}

func (p *imgProgress) finish() {
	if p != nil && p.drawn {
		fmt.Fprintln(os.Stderr)
	}
}

// imgBytes formats n as B, KiB, MiB or GiB.
func imgBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// imgIsTerminal reports whether f is a terminal (progress is drawn only there).
func imgIsTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

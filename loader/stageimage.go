package loader

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/image/registry"
)

// imageStage adapts an opened image to StageImage: its identity is the TOC
// digest from the footer, and Materialize lays out the loader's stage.
type imageStage struct {
	im   *image.Image
	opts MaterializeOptions
}

func (s imageStage) Digest() string { return s.im.TOCDigest() }
func (s imageStage) Materialize(ctx context.Context, dir string) error {
	return Materialize(ctx, s.im, dir, s.opts)
}

// OpenImage returns the StageRequest.Open function for an image reference: a
// file path, or an oci:// reference whose blob is first fetched (by the
// staging rank only) into stageDir and deleted once staged. opts.Progress,
// if set, sees the download and then the extraction; reg says how to talk to
// the registry (--insecure, timeouts).
func OpenImage(ref, stageDir string, opts MaterializeOptions, reg registry.Options) func(context.Context) (StageImage, func() error, error) {
	return func(ctx context.Context) (StageImage, func() error, error) {
		path, cleanup := ref, func() {}
		if registry.IsRef(ref) {
			// tmp.* names are removed by the next stager if we die here.
			f, err := os.CreateTemp(stageDir, "tmp.fetch-*.dlimg")
			if err != nil {
				return nil, nil, fmt.Errorf("fetch %s: %w", ref, err)
			}
			f.Close()
			path, cleanup = f.Name(), func() { os.Remove(f.Name()) }
			if _, err := registry.Fetch(ctx, ref, path, withProgress(reg, opts.Progress)); err != nil {
				cleanup()
				return nil, nil, err
			}
		}
		// StageDir: the TOC header is checked against the stage's free
		// inodes and bytes before the TOC is read (docs/SPEC.md 3.2).
		im, err := image.OpenFileWith(path, image.OpenOptions{StageDir: stageDir})
		if errors.Is(err, fs.ErrNotExist) && !registry.IsRef(ref) {
			if s := consumedStage(stageDir, ref); s != nil { // consume.go
				return consumedImage{filepath.Base(s.Dir)}, func() error { return nil }, nil
			}
		}
		if err != nil {
			cleanup()
			return nil, nil, err // names the image and what is wrong
		}
		return imageStage{im: im, opts: opts}, func() error { defer cleanup(); return im.Close() }, nil
	}
}

func withProgress(reg registry.Options, progress func(done, total int64)) registry.Options {
	reg.Progress = progress
	return reg
}

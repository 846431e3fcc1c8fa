package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/image/registry"
	"github.com/dlbundle/dlbundle/internal/trustpath"
	"github.com/dlbundle/dlbundle/loader"
)

// imageStage adapts an opened image to StageImage: its identity is the TOC
// digest from the footer, and Materialize lays out the loader's stage.
type imageStage struct {
	im   *image.Image
	opts loader.MaterializeOptions
}

func (s imageStage) Digest() string { return s.im.TOCDigest() }
func (s imageStage) Materialize(ctx context.Context, dir string) error {
	return loader.Materialize(ctx, s.im, dir, s.opts)
}

// OpenImage returns the StageRequest.Open function for an image reference: a
// file path, or an oci:// reference whose blob is first fetched (by the
// staging rank only) into stageDir and deleted once staged. opts.Progress,
// if set, sees the download and then the extraction; reg says how to talk to
// the registry (--insecure, timeouts).
//
// A file path that this job consumed (stage --consume) is not opened again:
// the record of the consumption is looked up first (consume.go). Any other
// file is opened as openImageFile allows.
func OpenImage(ref, stageDir string, opts loader.MaterializeOptions, reg registry.Options) func(context.Context) (StageImage, func() error, error) {
	return func(ctx context.Context) (StageImage, func() error, error) {
		if !registry.IsRef(ref) {
			if name, ok := consumedRecord(stageDir, ref, os.Getenv); ok {
				if !isDir(filepath.Join(stageDir, name)) {
					return nil, nil, errConsumedGone(ref, name)
				}
				return consumedImage{name}, func() error { return nil }, nil
			}
			im, closeFile, err := openImageFile(ref, stageDir)
			if err != nil {
				return nil, nil, err
			}
			return imageStage{im: im, opts: opts}, closeFile, nil
		}
		// tmp.* names are removed by the next stager if we die here.
		f, err := os.CreateTemp(stageDir, "tmp.fetch-*.dlimg")
		if err != nil {
			return nil, nil, fmt.Errorf("fetch %s: %w", ref, err)
		}
		f.Close()
		path := f.Name()
		cleanup := func() { os.Remove(path) }
		if _, err := registry.Fetch(ctx, ref, path, withProgress(reg, opts.Progress)); err != nil {
			cleanup()
			return nil, nil, err
		}
		// StageDir: the TOC header is checked against the stage's free
		// inodes and bytes before the TOC is read (docs/SPEC.md 3.2).
		im, err := image.OpenFileWith(path, image.OpenOptions{StageDir: stageDir})
		if err != nil {
			cleanup()
			return nil, nil, err // names the image and what is wrong
		}
		return imageStage{im: im, opts: opts}, func() error { defer cleanup(); return im.Close() }, nil
	}
}

// openImageFile opens a local image file for staging, which may run as root
// in a Prolog on a path that a job script or a user chose:
//
//   - only where the one rule of package trustpath allows: walked from /
//     with *at calls, no entry trusted that another user made in a
//     directory every user can write (a directory too, whoever owns what
//     lies below it: an attacker's /tmp/victim-jobs holding the image the
//     victim's `mkdir -p; cp` expected to put there), nor a symbolic link
//     another user may have pointed elsewhere;
//   - without blocking: O_NONBLOCK, so that a FIFO at the path cannot hang
//     the node's staging under the stage lock; then only a regular file is
//     read, and only the one that was checked (device and inode);
//   - with its TOC header checked against stageDir's free inodes and bytes
//     before the TOC is read (image.OpenOptions).
func openImageFile(path, stageDir string) (*image.Image, func() error, error) {
	abs, err := loader.AbsPath(path)
	if err != nil {
		return nil, nil, err
	}
	last, err := trustpath.For(trustpath.Shared).Walk(abs)
	if err != nil {
		return nil, nil, imageTrustError(path, err)
	}
	defer last.Close()
	if !last.Exists {
		return nil, nil, &os.PathError{Op: "open", Path: path, Err: unix.ENOENT}
	}
	fd, err := unix.Openat(last.Dir.FD, last.Dir.Name(last.Name), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, nil, fmt.Errorf("image %s is %s, not a regular file; refusing to read it", path, fileKind(st.Mode))
	}
	if st.Dev != last.Node.Dev || st.Ino != last.Node.Ino {
		f.Close()
		return nil, nil, fmt.Errorf("image %s changed while it was being opened; refusing to stage it", path)
	}
	im, err := image.OpenWith(f, st.Size, image.OpenOptions{StageDir: stageDir})
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return im, func() error { im.Close(); return f.Close() }, nil
}

// imageTrustError says why an image path is refused and what to do.
func imageTrustError(path string, err error) error {
	var refusal *trustpath.Error
	if !errors.As(err, &refusal) {
		return err
	}
	return fmt.Errorf("image %w: another user could have put it there, or could swap it; refusing to stage it as uid %d; copy the image to a directory that only you (or its owner) can write, made by you (mktemp -d), not at a predictable name in a directory every user can write",
		err, os.Geteuid())
}

// fileKind names a file type for a message.
func fileKind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFLNK:
		return "a symbolic link"
	}
	return "not a regular file"
}

func withProgress(reg registry.Options, progress func(done, total int64)) registry.Options {
	reg.Progress = progress
	return reg
}

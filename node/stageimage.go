package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/image/registry"
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
//   - without blocking: O_NONBLOCK, so that a FIFO at the path cannot hang
//     the node's staging under the stage lock; then only a regular file is
//     read;
//   - only a file the caller may trust (trustImageFile): its own or root's,
//     or another user's where no one else could have put it;
//   - with its TOC header checked against stageDir's free inodes and bytes
//     before the TOC is read (image.OpenOptions).
func openImageFile(path, stageDir string) (*image.Image, func() error, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
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
	if err := trustImageFile(path, &st); err != nil {
		f.Close()
		return nil, nil, err
	}
	im, err := image.OpenWith(f, st.Size, image.OpenOptions{StageDir: stageDir})
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return im, func() error { im.Close(); return f.Close() }, nil
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

// trustImageFile decides whether the caller may stage the image file st
// (open at path). Who may own it:
//
//   - the caller or root: always (only they can have written it);
//   - another user: only when nobody else could have put it at path: the
//     directory that holds it is not writable by every user, and no
//     symbolic link on the way lies in such a directory unless the caller,
//     root or that directory's owner made it (what fs.protected_symlinks
//     would ensure, were it set). A shared image in a project directory is
//     fine; uid 65534's file at a name in /tmp that a root job's script
//     expected to find its own copy at is not.
//
// The walk costs a lstat per path component, only for another user's image.
func trustImageFile(path string, st *unix.Stat_t) error {
	uid := uint32(os.Geteuid())
	if st.Uid == uid || st.Uid == 0 {
		return nil
	}
	abs, err := loader.AbsPath(path)
	if err != nil {
		return err
	}
	parent, final, dir, err := resolveImagePath(abs, uid)
	if err != nil {
		return err
	}
	switch {
	case final.Dev != st.Dev || final.Ino != st.Ino:
		return fmt.Errorf("image %s changed while it was being opened; refusing to stage it", path)
	case parent.Mode&0o002 != 0:
		return fmt.Errorf("image %s is owned by uid %d and lies in %s, which every user can write (mode %#o): anyone could have put it there; refusing to stage another user's file from there as uid %d; copy it to a directory that only you (or its owner) can write",
			path, st.Uid, dir, parent.Mode&0o7777, uid)
	}
	return nil
}

// resolveImagePath follows abs as the kernel would, component by component
// (lstat), refusing a symbolic link that lies in a world-writable directory
// and belongs to neither uid, root nor that directory's owner. It returns the
// stat of the final file's directory, of the file, and the directory's path.
func resolveImagePath(abs string, uid uint32) (parent, final unix.Stat_t, dir string, err error) {
	dir = "/"
	if err = unix.Lstat(dir, &parent); err != nil {
		return
	}
	pending := strings.Split(strings.TrimPrefix(abs, "/"), "/")
	for links := 0; len(pending) > 0; {
		c := pending[0]
		pending = pending[1:]
		switch c {
		case "", ".":
			continue
		case "..": // dir has no symlinks: its lexical parent is its parent
			dir = filepath.Dir(dir)
			if err = unix.Lstat(dir, &parent); err != nil {
				return
			}
			continue
		}
		next := filepath.Join(dir, c)
		var st unix.Stat_t
		if err = unix.Lstat(next, &st); err != nil {
			err = &os.PathError{Op: "lstat", Path: next, Err: err}
			return
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			if parent.Mode&0o002 != 0 && st.Uid != uid && st.Uid != 0 && st.Uid != parent.Uid {
				err = fmt.Errorf("image path %s goes through %s, a symbolic link of uid %d in %s, which every user can write: anyone could have pointed it elsewhere; refusing", abs, next, st.Uid, dir)
				return
			}
			if links++; links > maxLinks {
				err = &os.PathError{Op: "open", Path: abs, Err: unix.ELOOP}
				return
			}
			var target string
			if target, err = os.Readlink(next); err != nil {
				return
			}
			if filepath.IsAbs(target) {
				dir = "/"
				if err = unix.Lstat(dir, &parent); err != nil {
					return
				}
			}
			pending = append(strings.Split(target, "/"), pending...)
			continue
		}
		if len(pending) == 0 {
			return parent, st, dir, nil
		}
		dir, parent = next, st
	}
	err = fmt.Errorf("image path %s names a directory", abs)
	return
}

func withProgress(reg registry.Options, progress func(done, total int64)) registry.Options {
	reg.Progress = progress
	return reg
}

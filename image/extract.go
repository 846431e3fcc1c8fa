package image

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ExtractOptions tune Extract.
type ExtractOptions struct {
	Workers  int                     // 0 = runtime.NumCPU()
	Progress func(done, total int64) // uncompressed bytes written; may be nil
	// SkipDigests trusts each frame's zstd checksum (XXH64, always checked:
	// it catches corruption) instead of also checking the SHA-256 of every
	// object's compressed frames (which catches substitution too). Only for
	// images whose bytes were already authenticated, e.g. a registry blob
	// pulled by digest or a file checked with `dlbundle verify`.
	SkipDigests bool
}

// Extract materialises the tree under dir (docs/SPEC.md 3.1): directories,
// regular files (mode, mtime kept), symlinks rewritten to resolve inside dir,
// nothing for missing/external entries. It reads the image front to back once,
// checks every digest and never writes outside dir. dir must not exist or be
// empty; on failure everything Extract created is removed.
func (im *Image) Extract(ctx context.Context, dir string, opts ExtractOptions) (err error) {
	dir, err = filepath.Abs(dir)
	if err != nil {
		return err
	}
	createdDir, err := prepareDir(dir)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			cleanup(dir, createdDir)
		}
	}()
	x := &extractor{im: im, dir: dir, files: map[int][]*os.File{}}
	if err := x.mkdirs(); err != nil {
		return err
	}
	if err := x.emptyFiles(); err != nil {
		return err
	}
	var total int64
	for _, o := range im.owners() {
		total += im.toc.Entries[o].Size
	}
	var progress func(int64)
	if opts.Progress != nil {
		progress = func(done int64) { opts.Progress(done, total) }
		opts.Progress(0, total)
	}
	// The frames' digest authenticates the content (decompression is
	// deterministic) at a third of the hashing: the content digest itself is
	// checked by Verify and Content.
	err = im.decodeObjects(ctx, opts.Workers, x, progress, digestChecks{frames: !opts.SkipDigests, stream: true})
	x.closeAll()
	if err != nil {
		return err
	}
	if err := x.symlinks(); err != nil {
		return err
	}
	return x.finishDirs()
}

// prepareDir creates dir or checks that it is an empty directory.
func prepareDir(dir string) (created bool, err error) {
	fi, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return false, err
		}
		if err := os.Mkdir(dir, 0o700); err != nil {
			return false, err
		}
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if !fi.IsDir() {
		return false, fmt.Errorf("extract target %s exists and is not a directory", dir)
	}
	f, err := os.Open(dir)
	if err != nil {
		return false, err
	}
	defer f.Close()
	if names, _ := f.Readdirnames(1); len(names) > 0 {
		return false, fmt.Errorf("extract target %s is not empty; give a new or empty directory", dir)
	}
	return false, nil
}

// cleanup removes what a failed extraction created: dir itself when it was
// created, else everything in it (it was empty before).
func cleanup(dir string, createdDir bool) {
	makeWritable(dir)
	if createdDir {
		os.RemoveAll(dir)
		return
	}
	if f, err := os.Open(dir); err == nil {
		names, _ := f.Readdirnames(-1)
		f.Close()
		for _, n := range names {
			os.RemoveAll(filepath.Join(dir, n))
		}
	}
}

// makeWritable gives the owner write permission on every directory below dir
// so that RemoveAll can delete read-only directories from the image.
func makeWritable(dir string) {
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
}

type extractor struct {
	im    *Image
	dir   string
	mu    sync.Mutex
	files map[int][]*os.File // owner -> open files of all entries sharing its frames
}

// local is the host path of image path p.
func (x *extractor) local(p string) string { return x.dir + p }

// mkdirs creates every directory entry and every parent of an extracted
// entry, owner-writable until finishDirs sets their modes.
func (x *extractor) mkdirs() error {
	need := map[string]bool{}
	for i := range x.im.toc.Entries {
		e := &x.im.toc.Entries[i]
		switch e.Type {
		case TypeDir:
			need[e.Path] = true
		case TypeRegular, TypeSymlink:
		default:
			continue
		}
		for p := path.Dir(e.Path); p != "/"; p = path.Dir(p) {
			need[p] = true
		}
	}
	delete(need, "/")
	dirs := make([]string, 0, len(need))
	for p := range need {
		dirs = append(dirs, p)
	}
	sort.Strings(dirs) // parents sort before their children
	for _, p := range dirs {
		if err := os.Mkdir(x.local(p), 0o700); err != nil {
			return fmt.Errorf("extracting %s: %w", p, err)
		}
	}
	return nil
}

// create makes a new regular file for entry e; never follows a symlink.
func (x *extractor) create(e *Entry) (*os.File, error) {
	f, err := os.OpenFile(x.local(e.Path), os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("extracting %s: %w", e.Path, err)
	}
	return f, nil
}

func (x *extractor) emptyFiles() error {
	for i := range x.im.toc.Entries {
		e := &x.im.toc.Entries[i]
		if e.Type != TypeRegular || e.Size != 0 {
			continue
		}
		f, err := x.create(e)
		if err != nil {
			return err
		}
		if err := x.finishFile(f, e); err != nil {
			return err
		}
	}
	return nil
}

// fileMode drops setuid and setgid: an image must not create privileged files.
func fileMode(e *Entry) os.FileMode {
	m := os.FileMode(e.Mode & 0o777)
	if e.Mode&0o1000 != 0 {
		m |= os.ModeSticky
	}
	if e.Mode&0o7777 == 0 {
		if e.Type == TypeDir {
			return 0o755
		}
		return 0o644
	}
	return m
}

// finishFile sets mode and mtime and closes f.
func (x *extractor) finishFile(f *os.File, e *Entry) error {
	err := f.Chmod(fileMode(e))
	if err == nil {
		err = futimens(f, e.MtimeNS)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("extracting %s: %w", e.Path, err)
	}
	return nil
}

// futimens sets f's atime and mtime to ns (utimensat with a NULL path: by
// descriptor, no path lookup).
func futimens(f *os.File, ns int64) error {
	ts := [2]unix.Timespec{unix.NsecToTimespec(ns), unix.NsecToTimespec(ns)}
	_, _, errno := unix.Syscall6(unix.SYS_UTIMENSAT, f.Fd(), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
	if errno != 0 {
		return &os.PathError{Op: "futimens", Path: f.Name(), Err: errno}
	}
	return nil
}

// begin opens the files of every entry that shares owner's frames.
func (x *extractor) begin(owner int) error {
	var fs []*os.File
	for _, i := range x.im.sharers[owner] {
		f, err := x.create(&x.im.toc.Entries[i])
		if err != nil {
			for _, f := range fs {
				f.Close()
			}
			return err
		}
		fs = append(fs, f)
	}
	x.mu.Lock()
	x.files[owner] = fs
	x.mu.Unlock()
	return nil
}

func (x *extractor) write(owner int, off int64, content []byte) error {
	x.mu.Lock()
	fs := x.files[owner]
	x.mu.Unlock()
	for _, f := range fs {
		if _, err := f.WriteAt(content, off); err != nil {
			return fmt.Errorf("extracting %s: %w", x.im.toc.Entries[owner].Path, err)
		}
	}
	return nil
}

func (x *extractor) end(owner int) error {
	x.mu.Lock()
	fs := x.files[owner]
	delete(x.files, owner)
	x.mu.Unlock()
	var err error
	for k, i := range x.im.sharers[owner] {
		if ferr := x.finishFile(fs[k], &x.im.toc.Entries[i]); err == nil {
			err = ferr
		}
	}
	return err
}

func (x *extractor) closeAll() {
	x.mu.Lock()
	defer x.mu.Unlock()
	for o, fs := range x.files {
		for _, f := range fs {
			f.Close()
		}
		delete(x.files, o)
	}
}

// symlinks creates the symlinks, targets rewritten to stay inside dir.
func (x *extractor) symlinks() error {
	for i := range x.im.toc.Entries {
		e := &x.im.toc.Entries[i]
		if e.Type != TypeSymlink {
			continue
		}
		if err := os.Symlink(insideTarget(e.Path, e.Target), x.local(e.Path)); err != nil {
			return fmt.Errorf("extracting symlink %s: %w", e.Path, err)
		}
		ts := []unix.Timespec{unix.NsecToTimespec(e.MtimeNS), unix.NsecToTimespec(e.MtimeNS)}
		unix.UtimesNanoAt(unix.AT_FDCWD, x.local(e.Path), ts, unix.AT_SYMLINK_NOFOLLOW)
	}
	return nil
}

// insideTarget rewrites the target of symlink link so that, created at
// dir+link, it resolves to dir+(the image path the original resolves to):
// resolve lexically in the image ("/.." is "/"), then make it relative to the
// link's directory.
func insideTarget(link, target string) string {
	parent := path.Dir(link)
	abs := target
	if !strings.HasPrefix(target, "/") {
		abs = path.Join(parent, target)
	}
	abs = path.Clean("/" + abs)
	rel, err := filepath.Rel(parent, abs)
	if err != nil { // cannot happen: both are absolute
		return "."
	}
	if strings.HasSuffix(target, "/") && rel != "." {
		rel += "/"
	}
	return rel
}

// finishDirs sets directory modes and mtimes, deepest first (creating
// entries below a directory changes its mtime).
func (x *extractor) finishDirs() error {
	var dirs []*Entry
	for i := range x.im.toc.Entries {
		if e := &x.im.toc.Entries[i]; e.Type == TypeDir {
			dirs = append(dirs, e)
		}
	}
	sort.Slice(dirs, func(a, b int) bool { return dirs[a].Path > dirs[b].Path })
	for _, e := range dirs {
		p := x.local(e.Path)
		if e.Path == "/" {
			continue // dir itself belongs to the caller
		}
		if err := os.Chmod(p, fileMode(e)); err != nil {
			return fmt.Errorf("extracting %s: %w", e.Path, err)
		}
		if e.MtimeNS != 0 {
			t := time.Unix(0, e.MtimeNS)
			if err := os.Chtimes(p, t, t); err != nil {
				return fmt.Errorf("extracting %s: %w", e.Path, err)
			}
		}
	}
	return nil
}

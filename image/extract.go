package image

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/internal/stagetime"
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
	// OnHead, if set, is given the first bytes (up to HeadLen) of each
	// regular file's content, as decoded and written, once per entry
	// (each entry sharing an object's frames gets them), concurrently
	// from the decode workers; before the digest of the whole object is
	// checked, so a caller keeps what it learns only if Extract succeeds.
	// Not called for empty files.
	OnHead func(e *Entry, head []byte)
}

// HeadLen is the most ExtractOptions.OnHead is given of a file.
const HeadLen = 64

// Extract materialises the tree under dir (docs/SPEC.md 3.1): directories,
// regular files (mode, mtime kept), symlinks rewritten to resolve inside dir,
// nothing for missing/external entries. It reads the image front to back once,
// checks every digest and never writes outside dir, even while another user
// renames or replaces what it creates: dir's path is walked with O_NOFOLLOW
// (following only symlinks of root or the caller), an existing dir must
// belong to the caller, and everything below it is made relative to
// directory descriptors extraction opened itself (dirtree.go). dir must not
// exist or be empty; on failure everything Extract created is removed.
func (im *Image) Extract(ctx context.Context, dir string, opts ExtractOptions) (err error) {
	dir, err = filepath.Abs(dir)
	if err != nil {
		return err
	}
	t, err := openTarget(dir)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			t.removeCreated()
		}
		t.close()
	}()
	x := &extractor{im: im, dir: dir, t: t, files: map[int][]int{}, memFS: isMemFS(t.root), onHead: opts.OnHead}
	stop := stagetime.Start("extract: mkdirs")
	err = x.mkdirs()
	stop()
	if err != nil {
		return err
	}
	stop = stagetime.Start("extract: empty files")
	err = x.emptyFiles()
	stop()
	if err != nil {
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
	stop = stagetime.Start("extract: decode and write files (wall)")
	err = im.decodeObjects(ctx, opts.Workers, x, progress, digestChecks{frames: !opts.SkipDigests, stream: true})
	stop()
	x.closeAll()
	if err != nil {
		return err
	}
	stop = stagetime.Start("extract: symlinks")
	err = x.symlinks()
	stop()
	if err != nil {
		return err
	}
	defer stagetime.Start("extract: directory modes and times")()
	return x.finishDirs()
}

type extractor struct {
	im    *Image
	dir   string // for messages
	t     *tree
	mu    sync.Mutex
	files map[int][]int // owner -> open descriptors of all entries sharing its frames
	memFS bool          // dir is on tmpfs: writes are memory copies (rawPwrite)
	// onHead: ExtractOptions.OnHead
	onHead func(e *Entry, head []byte)
}

// local is the host path of image path p, quoted for messages (nothing is
// opened by this name).
func (x *extractor) local(p string) string { return quote(x.dir + p) }

// mkdirs creates every directory entry and every parent of an extracted
// entry, owner-only until finishDirs sets their modes.
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
	x.t.reserve(len(dirs))
	for _, p := range dirs {
		if err := x.t.mkdir(p); err != nil {
			return fmt.Errorf("extracting %s: %w", quote(p), err)
		}
	}
	return nil
}

// create makes a new regular file for entry e in its directory's
// descriptor; never follows a symlink. A raw descriptor, not an *os.File:
// os.OpenFile adds four fcntl and an epoll_ctl per file (7,374 and 1,843
// calls for the 1,840 files of a torch image), ~20% of the cost of creating
// a file on this VM (docs/bench/stage.md).
func (x *extractor) create(e *Entry) (int, error) {
	parent, release, err := x.t.dirFD(path.Dir(e.Path))
	if err != nil {
		return -1, fmt.Errorf("extracting %s: %w", quote(e.Path), err)
	}
	defer release()
	t0 := stagetime.Now()
	fd, err := unix.Openat(parent, path.Base(e.Path), unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	stagetime.Since("workers: create files (openat)", t0, 0)
	if err != nil {
		return -1, fmt.Errorf("extracting %s: %w", quote(e.Path), &os.PathError{Op: "openat", Path: x.local(e.Path), Err: err})
	}
	return fd, nil
}

func (x *extractor) emptyFiles() error {
	for i := range x.im.toc.Entries {
		e := &x.im.toc.Entries[i]
		if e.Type != TypeRegular || e.Size != 0 {
			continue
		}
		fd, err := x.create(e)
		if err != nil {
			return err
		}
		if err := x.finishFile(fd, e); err != nil {
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

// finishFile sets mode and mtime and closes fd.
func (x *extractor) finishFile(fd int, e *Entry) error {
	t0 := stagetime.Now()
	err := unix.Fchmod(fd, uint32(unixMode(fileMode(e))))
	if err == nil {
		err = futimens(fd, e.MtimeNS)
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	stagetime.Since("workers: file mode, times, close", t0, 0)
	if err != nil {
		return fmt.Errorf("extracting %s: %w", quote(e.Path), &os.PathError{Op: "finish", Path: x.local(e.Path), Err: err})
	}
	return nil
}

// unixMode is the st_mode permission bits of m (os.ModeSticky is not 0o1000).
func unixMode(m os.FileMode) uint32 {
	u := uint32(m.Perm())
	if m&os.ModeSticky != 0 {
		u |= unix.S_ISVTX
	}
	return u
}

// futimens sets fd's atime and mtime to ns (utimensat with a NULL path: by
// descriptor, no path lookup).
func futimens(fd int, ns int64) error {
	ts := [2]unix.Timespec{unix.NsecToTimespec(ns), unix.NsecToTimespec(ns)}
	_, _, errno := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// begin opens the files of every entry that shares owner's frames.
func (x *extractor) begin(owner int) error {
	var fs []int
	for _, i := range x.im.sharers[owner] {
		fd, err := x.create(&x.im.toc.Entries[i])
		if err != nil {
			for _, fd := range fs {
				unix.Close(fd)
			}
			return err
		}
		fs = append(fs, fd)
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
	t0 := stagetime.Now()
	for _, fd := range fs {
		if err := pwriteAll(fd, content, off, x.memFS); err != nil {
			return fmt.Errorf("extracting %s: %w", quote(x.im.toc.Entries[owner].Path), err)
		}
	}
	stagetime.Since("workers: write (pwrite)", t0, int64(len(content)*len(fs)))
	if off == 0 && x.onHead != nil && len(content) > 0 {
		head := content[:min(len(content), HeadLen)]
		for _, i := range x.im.sharers[owner] {
			x.onHead(&x.im.toc.Entries[i], head)
		}
	}
	return nil
}

// pwriteAll writes all of b at off (a short write, e.g. a full tmpfs, ends
// with the error of the next call). raw: see rawPwrite.
func pwriteAll(fd int, b []byte, off int64, raw bool) error {
	for len(b) > 0 {
		var n int
		var err error
		if raw {
			n, err = rawPwrite(fd, b, off)
		} else {
			n, err = unix.Pwrite(fd, b, off)
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("write at offset %d: %w", off, err)
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

// rawPwrite is pwrite(2) without telling the Go scheduler, for files on
// tmpfs, where a write is a copy into memory that never waits for a device.
// A write of a 4 MiB frame takes ~1 ms: through unix.Pwrite the runtime's
// monitor thread sees the worker's P in a system call for longer than its
// 20 us tick, hands the P to another thread and keeps polling every 20 us
// (on this VM, sysmon's nanosleep alone was ~3% of staging's CPU, plus a
// futex hand-off per write; docs/bench/stage.md).
func rawPwrite(fd int, b []byte, off int64) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, _, errno := unix.RawSyscall6(unix.SYS_PWRITE64, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(off), 0, 0)
	runtime.KeepAlive(b)
	if errno != 0 {
		return int(n), errno
	}
	return int(n), nil
}

// isMemFS tells whether the directory fd is on tmpfs (or ramfs).
func isMemFS(fd int) bool {
	var st unix.Statfs_t
	if unix.Fstatfs(fd, &st) != nil {
		return false
	}
	return st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC
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
		for _, fd := range fs {
			unix.Close(fd)
		}
		delete(x.files, o)
	}
}

// symlinks creates the symlinks, targets rewritten to stay inside dir, in
// their directories' descriptors.
func (x *extractor) symlinks() error {
	for i := range x.im.toc.Entries {
		e := &x.im.toc.Entries[i]
		if e.Type != TypeSymlink {
			continue
		}
		parent, release, err := x.t.dirFD(path.Dir(e.Path))
		if err != nil {
			return fmt.Errorf("extracting symlink %s: %w", quote(e.Path), err)
		}
		name := path.Base(e.Path)
		err = unix.Symlinkat(insideTarget(e.Path, e.Target), parent, name)
		if err == nil {
			ts := []unix.Timespec{unix.NsecToTimespec(e.MtimeNS), unix.NsecToTimespec(e.MtimeNS)}
			unix.UtimesNanoAt(parent, name, ts, unix.AT_SYMLINK_NOFOLLOW)
		}
		release()
		if err != nil {
			return fmt.Errorf("extracting symlink %s: %w", quote(e.Path), &os.PathError{Op: "symlinkat", Path: x.local(e.Path), Err: err})
		}
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
// entries below a directory changes its mtime), on their descriptors.
func (x *extractor) finishDirs() error {
	var dirs []*Entry
	for i := range x.im.toc.Entries {
		if e := &x.im.toc.Entries[i]; e.Type == TypeDir && e.Path != "/" { // dir itself belongs to the caller
			dirs = append(dirs, e)
		}
	}
	sort.Slice(dirs, func(a, b int) bool { return dirs[a].Path > dirs[b].Path })
	for _, e := range dirs {
		fd, release, err := x.t.dirFD(e.Path)
		if err == nil {
			err = unix.Fchmod(fd, unixMode(fileMode(e)))
			if err == nil && e.MtimeNS != 0 {
				err = futimens(fd, e.MtimeNS)
			}
			release()
		}
		if err != nil {
			return fmt.Errorf("extracting %s: %w", quote(e.Path), &os.PathError{Op: "finish", Path: x.local(e.Path), Err: err})
		}
	}
	return nil
}

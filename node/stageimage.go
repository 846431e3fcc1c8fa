package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/image/registry"
	"github.com/dlbundle/dlbundle/internal/abspath"
	"github.com/dlbundle/dlbundle/internal/stagetime"
	"github.com/dlbundle/dlbundle/internal/trustpath"
	"github.com/dlbundle/dlbundle/node/materialize"
)

// imageStage adapts an opened image to StageImage: its identity is the TOC
// digest from the footer, and Materialize lays out the loader's stage.
type imageStage struct {
	im   *image.Image
	opts materialize.Options
}

func (s imageStage) Digest() string { return s.im.TOCDigest() }
func (s imageStage) Materialize(ctx context.Context, dir string) error {
	return materialize.Materialize(ctx, s.im, dir, s.opts)
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
func OpenImage(ref, stageDir string, opts materialize.Options, reg registry.Options) func(context.Context) (StageImage, func() error, error) {
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
		return fetchImage(ctx, ref, stageDir, opts, reg)
	}
}

// Fetching an oci:// image holds no stage lock. Stage holds the node's stage
// lock when it calls Open (one stager at a time); a download may take as long
// as its declared size at the minimum rate allows, and a slow registry held
// the lock for over 70 s while the same user's exec of a local image waited.
// So the fetch lets the stage lock go (stageLockCtl) and takes a lock of its
// own reference instead, .fetch-<key>.lock: the node's ranks that stage the
// same reference wait for one download there, and take its outcome from
// fetch-<key>.result (one pull per node, as before); other images stage
// meanwhile. The stage lock is taken again before anything is materialized.
// The download is fetch-<key>.dlimg (and registry.Fetch's .partial-*), not a
// tmp.* name, which any stager removes under the stage lock; whoever holds
// the fetch lock owns those names, and gc removes those whose lock is free.
func fetchImage(ctx context.Context, ref, stageDir string, opts materialize.Options, reg registry.Options) (StageImage, func() error, error) {
	key := fetchKey(ref)
	path := filepath.Join(stageDir, fetchPrefix+key+".dlimg")
	result := filepath.Join(stageDir, fetchPrefix+key+".result")
	ctl, _ := ctx.Value(stageLockCtlKey{}).(*stageLockCtl)
	if ctl != nil {
		ctl.release()
	}
	relock := func(err error) error {
		if ctl != nil {
			if lerr := ctl.reacquire(ctx); lerr != nil && err == nil {
				return lerr
			}
		}
		return err
	}
	fl, waited, err := lockStage(ctx, filepath.Join(stageDir, ".fetch-"+key+".lock"), nil)
	if err != nil {
		return nil, nil, relock(err)
	}
	// The same reference fetched by the process we waited for: its outcome.
	if !waited.IsZero() {
		if digest, ok := readFetched(result, waited); ok {
			fl.unlock()
			if err := relock(nil); err != nil {
				return nil, nil, err
			}
			return fetchedElsewhere{ref: ref, digest: digest}, func() error { return nil }, nil
		}
		if err := readFailure(result, waited); err != nil {
			fl.unlock()
			return nil, nil, relock(err)
		}
	}
	removeFetchLeftovers(stageDir, key)
	fail := func(err error) (StageImage, func() error, error) {
		removeFetchLeftovers(stageDir, key)
		if ctx.Err() == nil {
			_ = writeFailure(stageDir, result, err)
		}
		fl.unlock()
		return nil, nil, relock(err)
	}
	if _, err := registry.Fetch(ctx, ref, path, withProgress(reg, opts.Progress)); err != nil {
		return fail(err)
	}
	// StageDir: the TOC header is checked against the stage's free inodes
	// and bytes before the TOC is read (docs/SPEC.md 3.2).
	im, err := image.OpenFileWith(path, image.OpenOptions{StageDir: stageDir})
	if err != nil {
		return fail(err) // names the image and what is wrong
	}
	if err := relock(nil); err != nil {
		im.Close()
		removeFetchLeftovers(stageDir, key)
		fl.unlock()
		return nil, nil, err
	}
	// Staged or not, the download is over: those waiting for it learn its
	// digest (they find the stage, or stage nothing and fail).
	done := func() error {
		err := im.Close()
		writeFetched(stageDir, result, im.TOCDigest())
		removeFetchLeftovers(stageDir, key)
		fl.unlock()
		return err
	}
	return imageStage{im: im, opts: opts}, done, nil
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
	stop := stagetime.Start("image: trust walk, open")
	f, size, err := openImageFileAs(path, uint32(os.Geteuid()))
	stop()
	if err != nil {
		return nil, nil, err
	}
	stop = stagetime.Start("image: footer and TOC read, digest, decoded")
	im, err := image.OpenWith(f, size, image.OpenOptions{StageDir: stageDir})
	stop()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return im, func() error { im.Close(); return f.Close() }, nil
}

// openImageFileAs opens the image file at path under the trust rule for
// uid (the stager, or the job's user that root stages for) and returns it
// with its size, without reading a byte of it: a regular file, the one
// the walk checked.
func openImageFileAs(path string, uid uint32) (*os.File, int64, error) {
	abs, err := abspath.Abs(path)
	if err != nil {
		return nil, 0, err
	}
	last, err := (&trustpath.Walker{Rule: trustpath.Shared, Uid: uid}).Walk(abs)
	if err != nil {
		return nil, 0, imageTrustError(path, err, uid)
	}
	defer last.Close()
	if !last.Exists {
		return nil, 0, &os.PathError{Op: "open", Path: path, Err: unix.ENOENT}
	}
	fd, err := unix.Openat(last.Dir.FD, last.Dir.Name(last.Name), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, 0, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, 0, fmt.Errorf("image %s is %s, not a regular file; refusing to read it", path, fileKind(st.Mode))
	}
	if st.Dev != last.Node.Dev || st.Ino != last.Node.Ino {
		f.Close()
		return nil, 0, fmt.Errorf("image %s changed while it was being opened; refusing to stage it", path)
	}
	return f, st.Size, nil
}

// imageTrustError says why an image path is refused and what to do.
func imageTrustError(path string, err error, uid uint32) error {
	var refusal *trustpath.Error
	if !errors.As(err, &refusal) {
		return err
	}
	return fmt.Errorf("image %w; refusing to stage it as uid %d: copy the image into a directory you made yourself (mktemp -d), not to a predictable name in a directory every user can write",
		err, uid)
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

// fetchPrefix starts the names of a fetch in the stage dir:
// fetch-<key>.dlimg (and .partial-*), fetch-<key>.result.
const fetchPrefix = "fetch-"

// fetchKey names a reference's fetch.
func fetchKey(ref string) string {
	h := sha256.Sum256([]byte("dlbundle-fetch-v1\x00" + ref))
	return hex.EncodeToString(h[:16])
}

// writeFetched records that the fetch of a reference ended with an image of
// digest (the result file's format is writeFailure's: a time, then text).
func writeFetched(dir, result, digest string) {
	_ = writeFailure(dir, result, errors.New(fetchedMark+digest))
}

const fetchedMark = "fetched "

// readFetched returns the digest recorded in result by a fetch that ended
// after since.
func readFetched(result string, since time.Time) (string, bool) {
	b, ok := readMarker(result)
	if !ok {
		return "", false
	}
	stamp, text, ok := strings.Cut(string(b), "\n")
	ns, perr := strconv.ParseInt(stamp, 10, 64)
	digest, fetched := strings.CutPrefix(text, fetchedMark)
	if !ok || perr != nil || ns < since.UnixNano() || !fetched || !isSHA256Digest(digest) {
		return "", false
	}
	return digest, true
}

// removeFetchLeftovers removes the download of key (and its .partial-*
// files). The caller holds its fetch lock, or has found it free.
func removeFetchLeftovers(dir, key string) {
	d, err := trustpath.For(trustpath.Private).WalkDir(dir)
	if err != nil {
		return
	}
	defer d.Close()
	removeFetchLeftoversIn(d, key)
}

// removeFetchLeftoversIn is removeFetchLeftovers in the held stage dir d.
func removeFetchLeftoversIn(d *trustpath.Dir, key string) {
	for _, n := range dirNames(d) {
		if strings.HasPrefix(n, fetchPrefix+key+".dlimg") {
			unix.Unlinkat(d.FD, d.Name(n), 0)
		}
	}
}

// fetchedElsewhere stands for an image another process of the node fetched
// while this one waited: Stage finds its stage by digest.
type fetchedElsewhere struct{ ref, digest string }

func (f fetchedElsewhere) Digest() string { return f.digest }
func (f fetchedElsewhere) Materialize(context.Context, string) error {
	return fmt.Errorf("%w: another process on this node fetched %s (%s) but did not publish its stage (its own error says why)",
		ErrStagedElsewhere, f.ref, f.digest)
}

func withProgress(reg registry.Options, progress func(done, total int64)) registry.Options {
	reg.Progress = progress
	return reg
}

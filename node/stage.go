package node

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/internal/stagetime"
	"github.com/dlbundle/dlbundle/internal/trustpath"
	"github.com/dlbundle/dlbundle/loader/stagefmt"
)

// Layout of a stage directory (one per user and node):
//
//	<dir>/.lock                  flock held by the rank that is staging
//	<dir>/sha256-<hex>/          a complete stage, named by the image's TOC digest
//	<dir>/tmp.<random>/          a stage being built (renamed to sha256-<hex> when complete)
//	<dir>/.fetch-<key>.lock      flock of the rank downloading an oci:// reference
//	<dir>/fetch-<key>.dlimg      its download; fetch-<key>.result: how it ended
//	<dir>/by-path/<key>          symlink -> ../sha256-<hex>: lets later ranks find the
//	                             stage without touching the image (see StageAlias)
//	<dir>/failed.[job-<id>.]<key> why the last staging of an image failed, for the
//	                             ranks that waited for it (failureMarker)
const (
	stageLockName = ".lock"
	failedPrefix  = "failed."
	stageTmpGlob  = "tmp.*"
	aliasDirName  = "by-path"
)

// StageImage is what staging needs from an opened image.
type StageImage interface {
	// Digest identifies the image's content ("sha256:<hex>").
	Digest() string
	// Materialize lays out the complete stage in dir, an empty directory.
	Materialize(ctx context.Context, dir string) error
}

// StageRequest says what to stage where.
type StageRequest struct {
	// Dir is a stage directory checked by OpenStageDir.
	Dir string
	// Alias names the image without reading it (StageAlias); "" disables the
	// fast path, and then every call opens the image.
	Alias string
	// Open opens the image. Stage calls it at most once, and only when no
	// published stage is known for Alias. It returns a close function.
	Open func(ctx context.Context) (StageImage, func() error, error)
	// OnWait, if set, is called once when another process holds the lock.
	OnWait func()
	// OnMiss, if set, is called once when the alias names no published
	// stage, before the lock is taken: this call will wait or stage.
	OnMiss func()
	// Ref is the image as given (absolute path or oci:// reference). With
	// Alias it names the failure marker through which the staging rank
	// tells the ranks waiting for it why it failed; "" (and no Alias): none.
	Ref string
	// MustHave lists files (relative to a stage) without which a published
	// stage is not used: one missing means the stage is being removed (an
	// epilogue's rm -rf), and it is staged again.
	MustHave []string
}

// Staged is a complete, published stage.
type Staged struct {
	Dir    string // <stage dir>/sha256-<hex>
	Digest string // "sha256:<hex>", or "" when found through the alias (the image was not read)
	// Materialized is true when this call built the stage (the first rank).
	Materialized bool
}

// digestDirName maps an image digest to the name of its stage. The digest
// comes from the image file, which is untrusted: anything but sha256:<hex>
// is refused so that it cannot name a path outside the stage directory.
func digestDirName(digest string) (string, error) {
	if !isSHA256Digest(digest) {
		return "", fmt.Errorf("image digest %q is not sha256:<64 hex digits>; the image is corrupt", digest)
	}
	return strings.Replace(digest, ":", "-", 1), nil
}

// isSHA256Digest reports whether d is "sha256:" and 64 lower-case hex
// digits. (A regexp compiled at package init cost every rank's exec ~100
// allocations.)
func isSHA256Digest(d string) bool {
	hex, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(hex) != 64 {
		return false
	}
	for i := 0; i < len(hex); i++ {
		if c := hex[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Stage returns the published stage of an image, building it if needed.
//
// Protocol: (1) if Alias points at a published stage, use it: no lock, no
// access to the image. (2) Otherwise take the node's stage lock; check the
// alias again (another rank may have staged while we waited); open the image
// and read its digest; if that stage is published (another job staged the same
// image), record the alias and use it; else Materialize into a fresh
// tmp.<random> and rename it to sha256-<hex>. Whoever takes the lock first
// removes the temp dirs of stagers that died (the lock says no one else is
// writing them). Open may let the lock go while it waits on the network and
// take it again before it returns (an oci:// fetch: stageimage.go), so that
// a slow registry never holds the node's other images back. A stage is visible under its final name only once complete,
// so SIGKILL at any point leaves at most a temp dir that the next exec
// removes.
func Stage(ctx context.Context, req StageRequest) (*Staged, error) {
	if err := stagefmt.CheckStagePath(req.Dir); err != nil {
		return nil, err
	}
	if err := checkLoaderSplit(req.Dir); err != nil {
		return nil, err
	}
	stop := stagetime.Start("alias lookup")
	s := lookupAlias(req.Dir, req.Alias, req.MustHave)
	stop()
	if s != nil {
		return s, nil
	}
	if req.OnMiss != nil {
		stop := stagetime.Start("restore GOMAXPROCS (oneproc)")
		req.OnMiss()
		stop()
	}
	stop = stagetime.Start("stage lock")
	lock, waited, err := lockStage(ctx, filepath.Join(req.Dir, stageLockName), req.OnWait)
	stop()
	if err != nil {
		return nil, err
	}
	defer lock.unlock()
	if s := lookupAlias(req.Dir, req.Alias, req.MustHave); s != nil {
		return s, nil
	}
	// One pull per node: if the rank we waited for failed, its error is ours,
	// at once (a stalled registry or a corrupt image would otherwise cost
	// every rank of the node its own attempt, one after another). So is a
	// failure of this launch (the alias names the image and the launch)
	// recorded a moment ago by a rank we did not wait for: the ranks of one
	// launch start together, and one that comes just after the staging rank
	// failed would otherwise open the image again (3 of 4 ranks did).
	marker := failureMarker(req.Dir, req.Alias, req.Ref)
	since := waited
	// Only within a batch job (the alias starts with the job's prefix): an
	// alias outside any job names the image file, not a launch, and the
	// next command run by hand must try the image itself, not be told of
	// an unrelated command's failure.
	if recent := time.Now().Add(-failureReuse); strings.HasPrefix(req.Alias, "job-") && (since.IsZero() || recent.Before(since)) {
		// (also for a rank that waited for another that had just taken
		// the same failure: its wait began after the failure)
		since = recent
	}
	if !since.IsZero() && marker != "" {
		if err := readFailure(marker, since); err != nil {
			return nil, err
		}
	}
	// Open may let the lock go while it waits on the network (fetchImage).
	ctl := &stageLockCtl{l: lock, path: filepath.Join(req.Dir, stageLockName)}
	s, err = stageLocked(context.WithValue(ctx, stageLockCtlKey{}, ctl), req)
	switch {
	case marker == "":
	case err == nil:
		removeMarker(req.Dir, marker)
	case errors.Is(err, ErrStagedElsewhere): // already another's recorded failure
	case ctx.Err() == nil: // not for our own SIGTERM or time limit: waiters try themselves
		_ = writeFailure(req.Dir, marker, err)
	}
	return s, err
}

// stageLocked is Stage's part under the lock.
func stageLocked(ctx context.Context, req StageRequest) (*Staged, error) {
	// We hold the lock, so no live process is writing any temp dir: remove
	// what stagers that died left behind, even if we stage nothing.
	stop := stagetime.Start("remove stale temps")
	err := removeStaleTemps(req.Dir)
	stop()
	if err != nil {
		return nil, err
	}
	stop = stagetime.Start("image: open, trust walk, TOC")
	img, closeImage, err := req.Open(ctx)
	stop()
	if err != nil {
		return nil, err
	}
	defer func() {
		stop := stagetime.Start("image: close")
		closeImage()
		stop()
	}()
	name, err := digestDirName(img.Digest())
	if err != nil {
		return nil, err
	}
	final := filepath.Join(req.Dir, name)
	staged := &Staged{Dir: final, Digest: img.Digest()}
	// The stage dir, held: the names below are made and renamed in it by
	// descriptor.
	d, err := trustpath.For(trustpath.Private).WalkDir(req.Dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	if err := moveAsideIncomplete(d, req.Dir, name, req.MustHave); err != nil {
		return nil, err
	}
	if !isDir(final) {
		tmpName := "tmp." + randomName()
		if err := unix.Mkdirat(d.FD, d.Name(tmpName), 0o700); err != nil {
			return nil, fmt.Errorf("create stage: %w", &os.PathError{Op: "mkdir", Path: filepath.Join(req.Dir, tmpName), Err: err})
		}
		tmp := filepath.Join(req.Dir, tmpName)
		stop := stagetime.Start("materialize (all)")
		err = img.Materialize(ctx, tmp)
		stop()
		if err != nil {
			removeTree(tmp)
			if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
				return nil, fmt.Errorf("stage image into %s: %w; free space there or stage elsewhere with --stage-dir", req.Dir, err)
			}
			return nil, fmt.Errorf("stage image into %s: %w", req.Dir, err)
		}
		// A signal that came during the last steps ends staging here, before
		// anything is published.
		if err := ctx.Err(); err != nil {
			removeTree(tmp)
			return nil, fmt.Errorf("stage image into %s: %w", req.Dir, err)
		}
		stop = stagetime.Start("publish: ref, rename")
		writeStageRef(tmp, req.Ref) // for ls: which image this stage is
		// Made 0700; the stage is private to this user anyway.
		err = unix.Renameat(d.FD, d.Name(tmpName), d.FD, d.Name(name))
		stop()
		if err != nil {
			removeTree(tmp)
			return nil, fmt.Errorf("publish stage %s: %w", final, err)
		}
		staged.Materialized = true
	}
	// The alias only spares later ranks the image read: if it cannot be
	// written (e.g. no space left), the stage is still good to use.
	stop = stagetime.Start("publish: alias")
	_ = writeAlias(req.Dir, req.Alias, name)
	stop()
	return staged, nil
}

// failureMarker is the file through which a failed staging of the image
// (ref, within the job that alias names) is told to the ranks waiting for it.
func failureMarker(dir, alias, ref string) string {
	if alias == "" && ref == "" {
		return ""
	}
	sum := sha256.Sum256([]byte("dlbundle-stage-failure-v1\x00" + alias + "\x00" + ref))
	// Inside a batch job the alias starts with the job's prefix
	// (AliasJobPrefix, then 64 hex digits): the marker does too, so that
	// the job's epilog (gc --job) finds and removes it.
	job := ""
	if strings.HasPrefix(alias, "job-") && len(alias) > 64 {
		job = alias[:len(alias)-64]
	}
	return filepath.Join(dir, failedPrefix+job+hex.EncodeToString(sum[:16]))
}

// writeFailure records err in marker, a name in the stage dir dir
// (atomically: a temp file that the next stager removes if we die, then
// rename), with the time, so that only ranks that were already waiting take
// it (readFailure). Both are made by descriptor in dir, walked by the
// Private rule as staging checked it.
func writeFailure(dir, marker string, err error) error {
	if filepath.Dir(marker) != dir {
		return fmt.Errorf("%s is not in the stage dir %s", marker, dir)
	}
	d, werr := trustpath.For(trustpath.Private).WalkDir(dir)
	if werr != nil {
		return werr
	}
	defer d.Close()
	tmp := "tmp.failed-" + randomName()
	fd, oerr := unix.Openat(d.FD, d.Name(tmp), unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if oerr != nil {
		return &os.PathError{Op: "create", Path: d.Join(tmp), Err: oerr}
	}
	f := os.NewFile(uintptr(fd), d.Join(tmp))
	fmt.Fprintf(f, "%d\n%s", time.Now().UnixNano(), err)
	if cerr := f.Close(); cerr != nil {
		unix.Unlinkat(d.FD, d.Name(tmp), 0)
		return cerr
	}
	if rerr := unix.Renameat(d.FD, d.Name(tmp), d.FD, d.Name(filepath.Base(marker))); rerr != nil {
		unix.Unlinkat(d.FD, d.Name(tmp), 0)
		return &os.PathError{Op: "rename", Path: marker, Err: rerr}
	}
	return nil
}

// removeMarker removes a failure marker, a name in the stage dir dir, by
// descriptor in it.
func removeMarker(dir, marker string) {
	if filepath.Dir(marker) != dir {
		return
	}
	d, err := trustpath.For(trustpath.Private).WalkDir(dir)
	if err != nil {
		return
	}
	unix.Unlinkat(d.FD, d.Name(filepath.Base(marker)), 0)
	d.Close()
}

// readMarker reads a failure marker or fetch result (at most 1 MiB): a
// regular file of the caller's own in the stage dir, through the Private
// rule (never a FIFO, never through a link).
func readMarker(marker string) ([]byte, bool) {
	f, _, err := trustpath.For(trustpath.Private).OpenOwn(marker)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20+1))
	if err != nil || len(b) > 1<<20 {
		return nil, false
	}
	return b, true
}

// failureReuse is how long a launch's failure answers its other ranks that
// did not wait for it; a later attempt (the image fixed) tries again.
var failureReuse = 10 * time.Second

// staleFailure is the age past which gc removes a failure marker: far
// beyond failureReuse, and a marker is read by a waiter just after the
// failing stager lets the lock go, when it is new.
var staleFailure = time.Minute

// readFailure returns the failure recorded in marker if it was recorded
// after since (while we waited), else nil: an older failure (an earlier job,
// a stager killed before it could record anything) is retried.
func readFailure(marker string, since time.Time) error {
	b, ok := readMarker(marker)
	if !ok {
		return nil
	}
	stamp, text, ok := strings.Cut(string(b), "\n")
	ns, perr := strconv.ParseInt(stamp, 10, 64)
	if !ok || perr != nil || ns < since.UnixNano() {
		return nil
	}
	age := time.Since(time.Unix(0, ns)).Round(time.Millisecond)
	return fmt.Errorf("%w %v ago: %s", ErrStagedElsewhere, age, text)
}

// ErrStagedElsewhere wraps the error of another process on this node that
// staged the same image while this one waited, and failed.
var ErrStagedElsewhere = errors.New("staging failed in another process on this node")

// hasAll reports whether every name exists below dir.
func hasAll(dir string, names []string) bool {
	for _, n := range names {
		var st unix.Stat_t
		if unix.Lstat(filepath.Join(dir, n), &st) != nil {
			return false
		}
	}
	return true
}

// lookupAlias returns the published stage that alias points at, or nil.
func lookupAlias(dir, alias string, mustHave []string) *Staged {
	if alias == "" {
		return nil
	}
	link := filepath.Join(dir, aliasDirName, alias)
	target, err := os.Readlink(link)
	if err != nil {
		return nil
	}
	name := filepath.Base(target)
	if target != filepath.Join("..", name) || !strings.HasPrefix(name, "sha256-") {
		return nil // not written by us: ignore, the slow path rewrites it
	}
	// This use is the stage's last use (ListStages reads the aliases'
	// mtimes): gc's grace period counts from now, while this process goes
	// on to start the app from it. Recorded BEFORE the stage is checked: gc
	// renames a stage away, then looks for such a record (removeStage), so
	// either it sees this one and keeps the stage, or the check below finds
	// nothing and this process stages anew under the lock. The time is
	// explicit, in ns (UTIME_NOW has the kernel's coarse clock: two uses in
	// one tick would look like one). One utimensat on the node-local alias.
	now := unix.NsecToTimespec(time.Now().UnixNano())
	_ = unix.UtimesNanoAt(unix.AT_FDCWD, link, []unix.Timespec{now, now}, unix.AT_SYMLINK_NOFOLLOW)
	final := filepath.Join(dir, name)
	if !isDir(final) || !hasAll(final, mustHave) {
		return nil // stage removed (e.g. by an admin) or being removed: restage
	}
	return &Staged{Dir: final}
}

// writeAlias points alias at the stage name, atomically (symlink + rename),
// by descriptor in the stage dir walked by the Private rule and its by-path
// directory (made 0700).
func writeAlias(dir, alias, name string) error {
	if alias == "" {
		return nil
	}
	d, err := trustpath.For(trustpath.Private).WalkDir(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	aliasDir := d.Join(aliasDirName)
	bd, err := d.Enter(aliasDir, aliasDirName, 0o700)
	if err != nil {
		return fmt.Errorf("create %s: %w", aliasDir, err)
	}
	defer bd.Close()
	tmp := ".tmp." + randomName()
	if err := unix.Symlinkat(filepath.Join("..", name), bd.FD, bd.Name(tmp)); err != nil {
		return fmt.Errorf("write stage alias: %w", err)
	}
	if err := unix.Renameat(bd.FD, bd.Name(tmp), bd.FD, bd.Name(alias)); err != nil {
		unix.Unlinkat(bd.FD, bd.Name(tmp), 0)
		return fmt.Errorf("write stage alias: %w", err)
	}
	return nil
}

// moveAsideIncomplete moves the stage name of the held stage dir d (dir as
// asked) out of the way if it is there but half removed (an epilogue's
// rm -rf, an admin: rm may still be working in it), and removes it, so
// that it is staged again.
func moveAsideIncomplete(d *trustpath.Dir, dir, name string, mustHave []string) error {
	final := filepath.Join(dir, name)
	if !isDir(final) || hasAll(final, mustHave) {
		return nil
	}
	aside := "tmp.removed-" + randomName()
	if err := unix.Renameat(d.FD, d.Name(name), d.FD, d.Name(aside)); err != nil {
		return fmt.Errorf("stage %s is incomplete and cannot be moved aside: %w; remove it", final, err)
	}
	removeTree(filepath.Join(dir, aside))
	return nil
}

// staleAliasTemp: an alias temp link older than this belongs to a writer
// that died between its symlinkat and renameat (microseconds apart).
const staleAliasTemp = time.Minute

// removeStaleTemps removes what stagers that died left behind. The caller
// holds the stage lock, so no live process is writing a stage temp. Alias
// temps are another matter: writeAlias also runs outside the lock (a job's
// consumed and broadcast records, written after staging), and its temp
// link lives between a symlinkat and a renameat; removing it there fails
// that rank's rename (ENOENT). So only an alias temp older than
// staleAliasTemp is a dead writer's.
func removeStaleTemps(dir string) error {
	temps, _ := filepath.Glob(filepath.Join(dir, stageTmpGlob))
	aliasTemps, _ := filepath.Glob(filepath.Join(dir, aliasDirName, ".tmp.*"))
	for _, t := range aliasTemps {
		if fi, err := os.Lstat(t); err == nil && time.Since(fi.ModTime()) > staleAliasTemp {
			temps = append(temps, t)
		}
	}
	for _, t := range temps {
		if err := removeTree(t); err != nil {
			return fmt.Errorf("remove stale stage %s: %w", t, err)
		}
	}
	return nil
}

// removeTree removes a (partial) stage. Staged directories keep the image's
// modes, which may lack write permission, so make them writable first.
func removeTree(path string) error {
	filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(path)
}

func isDir(path string) bool {
	var st unix.Stat_t
	return unix.Lstat(path, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
}

func randomName() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

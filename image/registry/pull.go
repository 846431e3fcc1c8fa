package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/internal/units"
)

// Resolve returns the manifest digest ("sha256:HEX") that ref names now: one
// HEAD request for a tag, none for a digest reference. It does not check
// the artifact type (Fetch and Inspect do); use Pin to fetch exactly what
// was resolved.
func Resolve(ctx context.Context, ref string, opts Options) (manifestDigest string, err error) {
	r, err := parseRef(ref, opts)
	if err != nil {
		return "", err
	}
	if d, ok := digestOf(r); ok {
		return d, nil
	}
	desc, err := remote.Head(r, opts.remoteOptions(ctx)...)
	if err == nil {
		return desc.Digest.String(), nil
	}
	// Some registries do not answer HEAD for manifests; GET does. Other
	// failures (unreachable, denied, unknown) would only repeat.
	var terr *transport.Error
	if !errors.As(err, &terr) || terr.StatusCode == http.StatusUnauthorized ||
		terr.StatusCode == http.StatusForbidden || terr.StatusCode == http.StatusNotFound {
		return "", explain("resolve", r, err)
	}
	full, err := remote.Get(r, opts.remoteOptions(ctx)...)
	if err != nil {
		return "", explain("resolve", r, err)
	}
	return full.Digest.String(), nil
}

// Fetch downloads the image of ref into dst and returns the manifest digest.
// The image is streamed into a temporary file next to dst, its sha256 and
// size checked against the manifest, and renamed to dst only if they match:
// on any failure nothing is left at dst or beside it.
func Fetch(ctx context.Context, ref, dst string, opts Options) (manifestDigest string, err error) {
	r, err := parseRef(ref, opts)
	if err != nil {
		return "", err
	}
	desc, _, layer, err := getManifest(ctx, r, opts)
	if err != nil {
		return "", explain("pull", r, err)
	}
	if err := checkFreeSpace(filepath.Dir(dst), layer.Size); err != nil {
		return "", fmt.Errorf("pull %s: %w", r, err)
	}
	blobs, err := newBlobClient(ctx, r.Context(), opts)
	if err != nil {
		return "", explain("pull", r, err)
	}
	// DST.partial-N: visible, and matched by the stage's "tmp.*" sweep when
	// DST is a stage's tmp.* name, should this process be killed mid-way.
	tmp, err := os.CreateTemp(filepath.Dir(dst), filepath.Base(dst)+".partial-*")
	if err != nil {
		return "", fmt.Errorf("pull %s: %w", r, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()

	var got string
	for attempt := 0; ; attempt++ {
		got, err = download(ctx, blobs, layer.Digest, layer.Size, tmp, opts)
		var werr *writeError
		if errors.As(err, &werr) {
			// The local file system failed (ENOSPC: the space went to
			// someone else meanwhile): say so, not "registry unreachable",
			// and do not retry.
			return "", fmt.Errorf("pull %s: writing %s: %w", r, tmp.Name(), werr.err)
		}
		if err == nil || attempt == 2 || !transient(err) || ctx.Err() != nil {
			break
		}
		if _, err = tmp.Seek(0, io.SeekStart); err != nil {
			break
		}
		if err = tmp.Truncate(0); err != nil {
			break
		}
	}
	if err != nil {
		return "", explain("pull", r, err)
	}
	if got != layer.Digest.Hex {
		return "", fmt.Errorf("pull %s: %w: blob %s arrived with sha256:%s; the registry's copy is corrupt or was "+
			"tampered with (nothing written; push the image again)", r, ErrDigestMismatch, layer.Digest, got)
	}
	if err = tmp.Chmod(0o644); err != nil {
		return "", err
	}
	if err = tmp.Sync(); err != nil {
		return "", err
	}
	if err = tmp.Close(); err != nil {
		return "", err
	}
	if err = os.Rename(tmp.Name(), dst); err != nil {
		return "", fmt.Errorf("pull %s: %w", r, err)
	}
	return desc.Digest.String(), nil
}

// download copies the blob into w, at most size bytes, and returns the hex
// sha256 of what arrived. A failed write comes back as a *writeError; a
// blob arriving slower than opts' minimum rate as ErrTooSlow.
func download(ctx context.Context, blobs *blobClient, d v1.Hash, size int64, w io.Writer, opts Options) (string, error) {
	body, err := blobs.get(ctx, d, 0, 0)
	if err != nil {
		return "", err
	}
	defer body.Close()
	h := sha256.New()
	var src io.Reader = io.LimitReader(body, size+1) // one more byte reveals an oversized blob
	src = &rateReader{r: src, min: opts.minRate(), window: opts.timeout(), start: time.Now()}
	if opts.Progress != nil {
		src = &progressReader{ReadCloser: io.NopCloser(src), total: size, report: opts.Progress}
	}
	n, err := io.Copy(io.MultiWriter(&errWriter{w: w}, h), src)
	if err != nil {
		return "", err
	}
	if n != size {
		return "", fmt.Errorf("%w: blob %s has %d bytes, the manifest says %d", ErrDigestMismatch, d, n, size)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeError is a failure to write the download locally.
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

// errWriter marks the errors of w as writeErrors.
type errWriter struct{ w io.Writer }

func (e *errWriter) Write(b []byte) (int, error) {
	n, err := e.w.Write(b)
	if err != nil {
		err = &writeError{err}
	}
	return n, err
}

// rateReader fails a transfer that moves fewer than min bytes a second on
// average over a window: a registry trickling a byte every few seconds would
// otherwise hold a node's stage lock for ever, the stall timeout never
// firing. Checked as reads return; a read that blocks is
// bounded by the connection's stall timeout.
type rateReader struct {
	r      io.Reader
	min    int64 // bytes per second
	window time.Duration
	start  time.Time // of the current window
	n      int64     // bytes in the current window
	total  int64
}

func (r *rateReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	r.n += int64(n)
	r.total += int64(n)
	if el := time.Since(r.start); el >= r.window {
		if rate := float64(r.n) / el.Seconds(); rate < float64(r.min) {
			return n, fmt.Errorf("%w: %d bytes in the last %s (%.0f bytes/s), below the minimum of %d bytes/s, after %d bytes; "+
				"the registry or the link is too slow to stage from (a stage lock is held meanwhile): try again, or pull the image to a file first",
				ErrTooSlow, r.n, el.Round(time.Millisecond), rate, r.min, r.total)
		}
		r.start, r.n = time.Now(), 0
	}
	return n, err
}

// checkFreeSpace refuses, before any download, a blob of size bytes that
// the file system holding dir cannot take.
func checkFreeSpace(dir string, size int64) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return err
	}
	if free := int64(min(st.Bavail*uint64(st.Bsize), math.MaxInt64)); size > free {
		return fmt.Errorf("no space left on %s: the image needs %s, %s are free (%w); free space there or write it elsewhere (pull -o, exec --stage-dir)",
			dir, units.Bytes(size), units.Bytes(free), unix.ENOSPC)
	}
	return nil
}

// transient reports whether a failed download is worth starting again.
func transient(err error) bool {
	return errors.Is(err, io.ErrUnexpectedEOF) || isConnError(err)
}

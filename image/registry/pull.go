package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
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
		got, err = download(ctx, blobs, layer.Digest, layer.Size, tmp, opts.Progress)
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
// sha256 of what arrived.
func download(ctx context.Context, blobs *blobClient, d v1.Hash, size int64, w io.Writer, progress func(done, total int64)) (string, error) {
	body, err := blobs.get(ctx, d, 0, 0)
	if err != nil {
		return "", err
	}
	defer body.Close()
	h := sha256.New()
	var src io.Reader = io.LimitReader(body, size+1) // one more byte reveals an oversized blob
	if progress != nil {
		src = &progressReader{ReadCloser: io.NopCloser(src), total: size, report: progress}
	}
	n, err := io.Copy(io.MultiWriter(w, h), src)
	if err != nil {
		return "", err
	}
	if n != size {
		return "", fmt.Errorf("%w: blob %s has %d bytes, the manifest says %d", ErrDigestMismatch, d, n, size)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// transient reports whether a failed download is worth starting again.
func transient(err error) bool {
	return errors.Is(err, io.ErrUnexpectedEOF) || isConnError(err)
}

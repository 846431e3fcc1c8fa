package registry

import (
	"context"
	"fmt"
	"io"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/dlbundle/dlbundle/image"
)

// Info describes an image in a registry without downloading it.
type Info struct {
	Ref            string            // the reference, normalised (no oci:// prefix)
	ManifestDigest string            // sha256:HEX of the manifest
	Manifest       []byte            // the manifest as the registry served it
	Annotations    map[string]string // manifest annotations (Annotation* keys)
	ImageDigest    string            // sha256:HEX of the .dlimg file (the layer)
	ImageSize      int64             // bytes of the .dlimg file
	TOCDigest      string            // sha256:HEX of the table of contents (from the image when Image is set)

	// Image is the image opened over HTTP range requests: its footer and
	// table of contents (Entries, Lookup, Pilots, BuildInfo) are read and
	// verified; content reads would cost one request per frame, with ctx.
	// Nil when the registry does not serve byte ranges; TOCError says why.
	Image    *image.Image
	TOCError error
}

// Inspect reads the manifest of ref and, by range requests, the image's
// footer and table of contents: a few small requests, no bulk data.
func Inspect(ctx context.Context, ref string, opts Options) (*Info, error) {
	r, err := parseRef(ref, opts)
	if err != nil {
		return nil, err
	}
	desc, m, layer, err := getManifest(ctx, r, opts)
	if err != nil {
		return nil, explain("inspect", r, err)
	}
	info := &Info{
		Ref:            r.String(),
		ManifestDigest: desc.Digest.String(),
		Manifest:       desc.Manifest,
		Annotations:    m.Annotations,
		ImageDigest:    layer.Digest.String(),
		ImageSize:      layer.Size,
		TOCDigest:      m.Annotations[AnnotationTOCDigest],
	}
	c, err := newBlobClient(ctx, r.Context(), opts)
	if err != nil {
		return nil, explain("inspect", r, err)
	}
	blob := &Blob{ctx: ctx, client: c, ref: r, digest: layer.Digest, size: layer.Size}
	im, err := image.Open(blob, blob.size)
	if err != nil {
		info.TOCError = err
		return info, nil
	}
	if info.TOCDigest != "" && im.TOCDigest() != info.TOCDigest {
		im.Close()
		return nil, fmt.Errorf("inspect %s: %w: the manifest says the table of contents is %s, the image's footer says %s "+
			"(the image was replaced or tampered with; push it again)", r, ErrDigestMismatch, info.TOCDigest, im.TOCDigest())
	}
	info.TOCDigest, info.Image = im.TOCDigest(), im
	return info, nil
}

// Blob reads an image in a registry by HTTP range requests, so that a
// reader can take the footer and table of contents from its tail without
// downloading the rest. Bytes read this way are not verified against the
// image digest: verify what is read (the footer carries the TOC's sha256).
type Blob struct {
	ctx    context.Context
	client *blobClient
	ref    name.Reference
	digest v1.Hash
	size   int64
}

// OpenBlob returns the image of ref for range reads (one manifest request).
func OpenBlob(ctx context.Context, ref string, opts Options) (*Blob, error) {
	r, err := parseRef(ref, opts)
	if err != nil {
		return nil, err
	}
	_, _, layer, err := getManifest(ctx, r, opts)
	if err != nil {
		return nil, explain("inspect", r, err)
	}
	c, err := newBlobClient(ctx, r.Context(), opts)
	if err != nil {
		return nil, explain("inspect", r, err)
	}
	return &Blob{ctx: ctx, client: c, ref: r, digest: layer.Digest, size: layer.Size}, nil
}

// Size is the image's size in bytes.
func (b *Blob) Size() int64 { return b.size }

// ReadAt reads len(p) bytes at off with one range request.
func (b *Blob) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off >= b.size {
		return 0, io.EOF
	}
	n := min(int64(len(p)), b.size-off)
	body, err := b.client.get(b.ctx, b.digest, off, n)
	if err != nil {
		return 0, explain("inspect", b.ref, err)
	}
	defer body.Close()
	got, err := io.ReadFull(body, p[:n])
	if err != nil {
		return got, fmt.Errorf("inspect %s: reading bytes %d+%d of blob %s: %w", b.ref, off, n, b.digest, err)
	}
	if n < int64(len(p)) {
		return got, io.EOF
	}
	return got, nil
}

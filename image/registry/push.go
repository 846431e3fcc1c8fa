package registry

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Push uploads the image file as a dlbundle artifact to ref and returns the
// manifest digest ("sha256:HEX"). The file is streamed from disk (read
// twice: once to hash it, once to upload it); a blob the registry already
// holds is not uploaded again.
func Push(ctx context.Context, file, ref string, opts Options) (manifestDigest string, err error) {
	r, err := parseRef(ref, opts)
	if err != nil {
		return "", err
	}
	annotations, err := describe(file)
	if err != nil {
		return "", err
	}
	layer, err := newFileLayer(file, opts.Progress)
	if err != nil {
		return "", err
	}
	layerDesc := v1.Descriptor{
		MediaType:   LayerMediaType,
		Size:        layer.size,
		Digest:      layer.digest,
		Annotations: map[string]string{AnnotationTitle: filepath.Base(file)},
	}
	raw, err := artifactManifest(layerDesc, annotations)
	if err != nil {
		return "", err
	}
	img, err := partial.CompressedToImage(&artifact{manifest: raw, layer: layer})
	if err != nil {
		return "", err
	}
	if err := remote.Write(r, img, opts.remoteOptions(ctx)...); err != nil {
		return "", explain("push", r, err)
	}
	if opts.Progress != nil {
		opts.Progress(layer.size, layer.size) // also when the blob was already there
	}
	d, err := img.Digest()
	if err != nil {
		return "", err
	}
	return d.String(), nil
}

// artifact is the pushed manifest: go-containerregistry's mutate package
// cannot set artifactType, so the manifest is written here and wrapped.
type artifact struct {
	manifest []byte
	layer    *fileLayer
}

func (a *artifact) RawConfigFile() ([]byte, error)      { return emptyConfig, nil }
func (a *artifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (a *artifact) RawManifest() ([]byte, error)        { return a.manifest, nil }

func (a *artifact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if h == a.layer.digest {
		return a.layer, nil
	}
	return nil, fmt.Errorf("artifact has no blob %s", h)
}

// fileLayer streams the image file from disk (static.NewLayer would hold
// it in memory).
type fileLayer struct {
	path     string
	size     int64
	digest   v1.Hash
	progress func(done, total int64)
}

func newFileLayer(path string, progress func(done, total int64)) (*fileLayer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("push: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("push: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("push: %s is not a regular file; give the path of a .dlimg image", path)
	}
	h, n, err := v1.SHA256(f)
	if err != nil {
		return nil, fmt.Errorf("push: reading %s: %w", path, err)
	}
	if n != st.Size() {
		return nil, fmt.Errorf("push: %s changed size while being read (%d, then %d bytes); push it when it is complete", path, st.Size(), n)
	}
	return &fileLayer{path: path, size: n, digest: h, progress: progress}, nil
}

func (l *fileLayer) Digest() (v1.Hash, error)            { return l.digest, nil }
func (l *fileLayer) Size() (int64, error)                { return l.size, nil }
func (l *fileLayer) MediaType() (types.MediaType, error) { return LayerMediaType, nil }

// Compressed opens the file afresh: go-containerregistry calls it again to
// retry an upload. The registry verifies the digest of what it receives, so
// a file changed since hashing fails the push instead of publishing a lie.
func (l *fileLayer) Compressed() (io.ReadCloser, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return nil, err
	}
	if l.progress == nil {
		return f, nil
	}
	return &progressReader{ReadCloser: f, total: l.size, report: l.progress}, nil
}

// progressReader reports the bytes read so far.
type progressReader struct {
	io.ReadCloser
	done   atomic.Int64
	total  int64
	report func(done, total int64)
}

func (r *progressReader) Read(b []byte) (int, error) {
	n, err := r.ReadCloser.Read(b)
	if n > 0 {
		r.report(r.done.Add(int64(n)), r.total)
	}
	return n, err
}

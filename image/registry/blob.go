package registry

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// blobClient GETs blobs of one repository, whole or in byte ranges. It is
// go-containerregistry's authenticated transport with the same retries
// (remote.Layer cannot read a range, and Fetch wants to name a digest
// mismatch itself).
type blobClient struct {
	repo   name.Repository
	client *http.Client
}

func newBlobClient(ctx context.Context, repo name.Repository, opts Options) (*blobClient, error) {
	auth, err := authn.Resolve(ctx, opts.keychain(), repo)
	if err != nil {
		return nil, err
	}
	rt := transport.NewRetry(opts.httpTransport(),
		transport.WithRetryBackoff(retryBackoff),
		transport.WithRetryStatusCodes(http.StatusRequestTimeout, http.StatusTooManyRequests,
			http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout))
	rt = transport.NewUserAgent(rt, "dlbundle")
	tr, err := transport.NewWithContext(ctx, repo.Registry, auth, rt, []string{repo.Scope(transport.PullScope)})
	if err != nil {
		return nil, err
	}
	return &blobClient{repo: repo, client: &http.Client{Transport: tr}}, nil
}

// get returns the body of blob d, or of bytes [off, off+n) of it if n > 0.
// The caller closes the body.
func (c *blobClient) get(ctx context.Context, d v1.Hash, off, n int64) (io.ReadCloser, error) {
	u := url.URL{Scheme: c.repo.Scheme(), Host: c.repo.RegistryStr(),
		Path: fmt.Sprintf("/v2/%s/blobs/%s", c.repo.RepositoryStr(), d)}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	want := http.StatusOK
	if n > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+n-1))
		want = http.StatusPartialContent
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, err
	}
	if err := transport.CheckError(resp, want); err != nil {
		resp.Body.Close()
		return nil, err
	}
	if n > 0 && resp.ContentLength != n {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s with Range: got %d bytes, want %d", u.Redacted(), resp.ContentLength, n)
	}
	return resp.Body, nil
}

// getManifest fetches the manifest of ref and checks it is a dlbundle
// artifact.
func getManifest(ctx context.Context, r name.Reference, opts Options) (*remote.Descriptor, *v1.Manifest, v1.Descriptor, error) {
	desc, err := remote.Get(r, opts.remoteOptions(ctx)...)
	if err != nil {
		return nil, nil, v1.Descriptor{}, err
	}
	m, layer, err := checkManifest(desc.MediaType, desc.Manifest)
	if err != nil {
		return nil, nil, v1.Descriptor{}, err
	}
	return desc, m, layer, nil
}

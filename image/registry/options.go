package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/dlbundle/dlbundle/internal/untrusted"
)

// Options tune a registry operation. The zero value is ready to use.
type Options struct {
	// Insecure talks plain http (a lab registry). Registries on localhost,
	// loopback and RFC 1918 addresses use plain http even without it.
	Insecure bool
	// Progress, if not nil, is called as bytes of the image move (from one
	// goroutine at a time); total is the image's size.
	Progress func(done, total int64)
	// Keychain finds credentials; nil means authn.DefaultKeychain (docker
	// config, credential helpers, podman's auth.json via REGISTRY_AUTH_FILE).
	Keychain authn.Keychain
	// Timeout bounds every wait on the network: connecting, and any stall
	// of a request or response (no byte moving either way). 0 means 30 s.
	Timeout time.Duration
	// MinRate is the slowest a blob download may go, in bytes per second
	// on average over every Timeout window; slower fails with ErrTooSlow.
	// 0 means 64 KiB/s; negative: no minimum.
	MinRate int64
}

const defaultMinRate = 64 << 10

func (o Options) minRate() int64 {
	switch {
	case o.MinRate < 0:
		return 0
	case o.MinRate == 0:
		return defaultMinRate
	}
	return o.MinRate
}

const defaultTimeout = 30 * time.Second

// maxDial caps the connect timeout: an unreachable host should fail fast
// even when a long stall timeout is wanted for slow transfers.
const maxDial = 10 * time.Second

// retryBackoff retries transient failures (connection resets, timeouts,
// HTTP 408/429/5xx) three times in about 2 s; anything else fails at once.
var retryBackoff = remote.Backoff{Duration: 500 * time.Millisecond, Factor: 3, Jitter: 0.1, Steps: 3}

func (o Options) timeout() time.Duration {
	if o.Timeout > 0 {
		return o.Timeout
	}
	return defaultTimeout
}

func (o Options) keychain() authn.Keychain {
	if o.Keychain != nil {
		return o.Keychain
	}
	return authn.DefaultKeychain
}

// httpTransport is remote.DefaultTransport with every wait bounded.
func (o Options) httpTransport() http.RoundTripper {
	t := o.timeout()
	dial := min(t, maxDial)
	dialer := &net.Dialer{Timeout: dial, KeepAlive: 30 * time.Second}
	return &boundedTransport{max: maxSmallResponse, deadline: t, base: &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &stallConn{Conn: c, stall: t}, nil
		},
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          16,
		IdleConnTimeout:       t / 2, // close pooled conns before their stall deadline fires
		TLSHandshakeTimeout:   dial,
		ResponseHeaderTimeout: t,
		ExpectContinueTimeout: time.Second,
	}}
}

// remoteOptions are the go-containerregistry options for one operation.
func (o Options) remoteOptions(ctx context.Context) []remote.Option {
	return []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(o.keychain()),
		remote.WithTransport(o.httpTransport()),
		remote.WithRetryBackoff(retryBackoff),
		remote.WithUserAgent("dlbundle"),
		remote.WithJobs(2),
	}
}

// stallConn fails a connection on which no byte has moved, in either
// direction, for the stall time: every Read or Write pushes both deadlines
// forward (which also applies to a Read already blocked, such as the HTTP/1
// reader waiting for a response while a long upload is being written).
type stallConn struct {
	net.Conn
	stall time.Duration
}

func (c *stallConn) Read(b []byte) (int, error) {
	c.Conn.SetDeadline(time.Now().Add(c.stall))
	return c.Conn.Read(b)
}

func (c *stallConn) Write(b []byte) (int, error) {
	c.Conn.SetDeadline(time.Now().Add(c.stall))
	return c.Conn.Write(b)
}

// maxSmallResponse caps what a manifest, a token or any other response but
// a blob may weigh: the OCI distribution spec has registries accept
// manifests up to 4 MiB, and a dlbundle artifact's is under 2 KiB. A 95 MiB
// manifest took 613 MB of memory in the stager.
const maxSmallResponse = 4 << 20

// boundedTransport bounds every request that is not a blob transfer
// (manifests, tokens, tag lists, HEADs): its response must fit in max bytes
// and arrive whole within deadline (Options.Timeout). A registry trickling
// a manifest one byte every 2 s kept every read under the stall timeout
// and held the node's stage lock for over 70 s. Blob GETs are bounded by
// their declared size and the minimum rate (rateReader); uploads (push) by
// the stall timeout.
type boundedTransport struct {
	base     http.RoundTripper
	max      int64
	deadline time.Duration
}

func (b *boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead || isBlobRequest(req) {
		return b.base.RoundTrip(req)
	}
	ctx, cancel := context.WithTimeout(req.Context(), b.deadline)
	resp, err := b.base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		if ctx.Err() == context.DeadlineExceeded {
			return nil, b.tooSlow(req)
		}
		return nil, err
	}
	if resp.ContentLength > b.max {
		resp.Body.Close()
		cancel()
		return nil, b.tooLarge(req)
	}
	resp.Body = &boundedBody{rc: resp.Body, left: b.max, ctx: ctx, cancel: cancel, t: b, req: req}
	return resp, nil
}

// isBlobRequest reports whether req fetches a blob: its path, or that of
// a request that was redirected to it (registries send blob GETs on to
// object storage under other paths), has /blobs/ in it.
func isBlobRequest(req *http.Request) bool {
	for r := req; r != nil; {
		if strings.Contains(r.URL.Path, "/blobs/") {
			return true
		}
		if r.Response == nil {
			break
		}
		r = r.Response.Request
	}
	return false
}

func (b *boundedTransport) tooSlow(req *http.Request) error {
	return fmt.Errorf("%w: %s %s did not arrive whole within %s (manifests, tokens and other small responses must, whatever the pace of their bytes); the registry is too slow to stage from: try again, or raise --timeout",
		ErrTooSlow, req.Method, untrusted.Quote(req.URL.Redacted()), b.deadline)
}

func (b *boundedTransport) tooLarge(req *http.Request) error {
	return fmt.Errorf("%w: the response to %s %s is larger than %d bytes, the most a manifest or token may weigh; this is not a dlbundle image's registry answer",
		ErrTooLarge, req.Method, untrusted.Quote(req.URL.Redacted()), b.max)
}

// ErrTooLarge: a registry's response to a small request (manifest, token)
// exceeded maxSmallResponse.
var ErrTooLarge = errors.New("registry response too large")

type boundedBody struct {
	rc     io.ReadCloser
	left   int64
	ctx    context.Context
	cancel context.CancelFunc
	t      *boundedTransport
	req    *http.Request
}

func (b *boundedBody) Read(p []byte) (int, error) {
	// Reading up to one byte more than the cap tells a response that is too
	// large from one that is exactly at it.
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return 0, b.t.tooLarge(b.req)
	}
	if err != nil && err != io.EOF && b.ctx.Err() == context.DeadlineExceeded {
		return n, b.t.tooSlow(b.req)
	}
	return n, err
}

func (b *boundedBody) Close() error {
	defer b.cancel()
	return b.rc.Close()
}

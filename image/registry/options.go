package registry

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"
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
	return &http.Transport{
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
	}
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

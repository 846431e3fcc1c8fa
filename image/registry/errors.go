package registry

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/dlbundle/dlbundle/internal/untrusted"
)

// Kinds of failure, for errors.Is. The errors returned wrap one of these
// and say what to do about it.
var (
	ErrUnreachable    = errors.New("registry unreachable")
	ErrNotFound       = errors.New("not found in registry")
	ErrDenied         = errors.New("access denied by registry")
	ErrDigestMismatch = errors.New("digest mismatch")
	ErrNotArtifact    = errors.New("not a dlbundle artifact")
	ErrTooSlow        = errors.New("download too slow")
)

// explain turns an error from the network or the registry into one that
// names the reference, the kind of failure and the fix. what says which
// operation failed ("push", "pull", ...).
func explain(what string, ref name.Reference, err error) error {
	if err == nil {
		return nil
	}
	// The registry's words (error messages, bodies) reach terminals and
	// logs, and are replayed to a node's other ranks: a registry must not
	// be able to retitle a window or forge a "staged ok" line.
	err = networkText{err}
	reg := ref.Context().RegistryStr()
	var terr *transport.Error
	if errors.As(err, &terr) {
		switch {
		case terr.StatusCode == http.StatusUnauthorized || terr.StatusCode == http.StatusForbidden ||
			hasCode(terr, transport.UnauthorizedErrorCode, transport.DeniedErrorCode):
			return fmt.Errorf("%s %s: %w (HTTP %d): log in with `docker login %s` or `podman login %s` "+
				"(dlbundle reads ~/.docker/config.json, credential helpers and $REGISTRY_AUTH_FILE), "+
				"and check that the account may %s repository %s: %v",
				what, ref, ErrDenied, terr.StatusCode, reg, reg, verb(what), ref.Context().RepositoryStr(), err)
		case terr.StatusCode == http.StatusNotFound ||
			hasCode(terr, transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode, transport.BlobUnknownErrorCode):
			return fmt.Errorf("%s %s: %w: registry %s has no such repository, tag or digest "+
				"(check the spelling; GET /v2/%s/tags/list lists the tags): %v",
				what, ref, ErrNotFound, reg, ref.Context().RepositoryStr(), err)
		}
		return fmt.Errorf("%s %s: registry %s answered HTTP %d: %v", what, ref, reg, terr.StatusCode, err)
	}
	var nerr net.Error
	var derr *net.DNSError
	var cerr x509.UnknownAuthorityError
	var rerr tls.RecordHeaderError
	switch {
	case errors.As(err, &rerr) || strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return fmt.Errorf("%s %s: %w: %s speaks plain http, not https; use --insecure for a lab registry: %v",
			what, ref, ErrUnreachable, reg, err)
	case errors.As(err, &cerr):
		return fmt.Errorf("%s %s: %w: the TLS certificate of %s is not trusted; install its CA "+
			"(e.g. in /usr/local/share/ca-certificates and run update-ca-certificates): %v", what, ref, ErrUnreachable, reg, err)
	case errors.As(err, &derr):
		return fmt.Errorf("%s %s: %w: cannot resolve host %s; check the registry name: %v", what, ref, ErrUnreachable, reg, err)
	case errors.As(err, &nerr) && nerr.Timeout():
		return fmt.Errorf("%s %s: %w: %s stopped answering (no progress within the timeout, retried): %v; "+
			"try again later, or raise --timeout for a slow link", what, ref, ErrUnreachable, reg, err)
	case errors.As(err, &nerr) || isConnError(err):
		return fmt.Errorf("%s %s: %w: cannot talk to %s (%v); check the address and port, that the registry runs, "+
			"and use --insecure for a plain-http lab registry", what, ref, ErrUnreachable, reg, err)
	}
	return fmt.Errorf("%s %s: %w", what, ref, err)
}

// networkText wraps an error whose text came (partly) from the network:
// printed escaped (untrusted.Quote), unwrapped as it is for errors.Is/As.
type networkText struct{ err error }

func (e networkText) Error() string { return untrusted.Quote(e.err.Error()) }
func (e networkText) Unwrap() error { return e.err }

func hasCode(e *transport.Error, codes ...transport.ErrorCode) bool {
	for _, d := range e.Errors {
		for _, c := range codes {
			if d.Code == c {
				return true
			}
		}
	}
	return false
}

func isConnError(err error) bool {
	var oerr *net.OpError
	return errors.As(err, &oerr)
}

func verb(what string) string {
	if what == "push" {
		return "push to"
	}
	return "pull from"
}

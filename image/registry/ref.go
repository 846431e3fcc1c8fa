package registry

import (
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// Scheme marks a command-line argument as a registry reference rather than a
// file: oci://REGISTRY/REPO:TAG or oci://REGISTRY/REPO@sha256:HEX.
const Scheme = "oci://"

// IsRef reports whether arg names a registry reference (starts with oci://).
func IsRef(arg string) bool { return strings.HasPrefix(arg, Scheme) }

// parseRef accepts REF with or without the oci:// prefix. The registry host
// must be explicit: dlbundle never silently falls back to Docker Hub.
func parseRef(ref string, opts Options) (name.Reference, error) {
	s := strings.TrimPrefix(ref, Scheme)
	if s == "" {
		return nil, fmt.Errorf("empty registry reference; want REGISTRY/REPO:TAG or REGISTRY/REPO@sha256:HEX")
	}
	nopts := []name.Option{name.StrictValidation}
	if opts.Insecure {
		nopts = append(nopts, name.Insecure)
	}
	// StrictValidation refuses an implicit tag or registry; add the tag
	// "latest" ourselves only when neither a tag nor a digest is given.
	if !strings.Contains(s, "@") && !strings.Contains(s[strings.LastIndex(s, "/")+1:], ":") {
		s += ":latest"
	}
	first, _, ok := strings.Cut(s, "/")
	if !ok || !(strings.ContainsAny(first, ".:") || first == "localhost") {
		return nil, fmt.Errorf("registry reference %q has no registry host; write it as REGISTRY/REPO:TAG, e.g. registry.example.org:5000/apps/myapp:v1", ref)
	}
	r, err := name.ParseReference(s, nopts...)
	if err != nil {
		return nil, fmt.Errorf("bad registry reference %q: %v; want REGISTRY/REPO:TAG or REGISTRY/REPO@sha256:HEX", ref, err)
	}
	return r, nil
}

// Pin returns ref with its tag replaced by manifestDigest
// (REGISTRY/REPO@sha256:HEX, no oci:// prefix), so that a tag resolved once
// with Resolve is fetched exactly as resolved even if it moves meanwhile.
func Pin(ref, manifestDigest string) (string, error) {
	r, err := parseRef(ref, Options{})
	if err != nil {
		return "", err
	}
	d, err := name.NewDigest(r.Context().Name()+"@"+manifestDigest, name.StrictValidation)
	if err != nil {
		return "", fmt.Errorf("bad manifest digest %q: %v", manifestDigest, err)
	}
	return d.String(), nil
}

// digestOf returns the digest of a digest reference.
func digestOf(r name.Reference) (string, bool) {
	d, ok := r.(name.Digest)
	if !ok {
		return "", false
	}
	return d.DigestStr(), true
}

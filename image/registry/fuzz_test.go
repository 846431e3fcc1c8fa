package registry

import (
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// FuzzCheckManifest feeds the manifest parser what a hostile registry
// could serve: it must never panic, and anything it accepts must be the
// one-layer dlbundle artifact Fetch relies on.
func FuzzCheckManifest(f *testing.F) {
	good, _ := artifactManifest(v1.Descriptor{MediaType: LayerMediaType, Size: 10,
		Digest: v1.Hash{Algorithm: "sha256", Hex: "0000000000000000000000000000000000000000000000000000000000000000"}}, nil)
	f.Add(string(types.OCIManifestSchema1), good)
	f.Add(string(types.OCIManifestSchema1), []byte(`{"schemaVersion":2,"config":{"mediaType":"application/vnd.dlbundle.artifact.v1"},"layers":[]}`))
	f.Add(string(types.OCIImageIndex), []byte(`{"manifests":[]}`))
	f.Add(string(types.DockerManifestSchema2), good)
	f.Add(string(types.OCIManifestSchema1), []byte(`{"artifactType":"application/vnd.dlbundle.artifact.v1","layers":[{"mediaType":"application/vnd.dlbundle.image.v1+zstd","size":-1,"digest":"sha256:00"}]}`))
	f.Fuzz(func(t *testing.T, mediaType string, raw []byte) {
		m, layer, err := checkManifest(types.MediaType(mediaType), raw)
		if err != nil {
			return // v1.Hash parsing rejects non-hex digests, so URLs built from them are safe
		}
		if m == nil || len(m.Layers) != 1 || layer.MediaType != LayerMediaType || layer.Size <= 0 ||
			layer.Digest.Algorithm != "sha256" || len(layer.Digest.Hex) != 64 {
			t.Fatalf("accepted a manifest Fetch cannot use: %+v", m)
		}
	})
}

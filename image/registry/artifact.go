package registry

import (
	"bytes"
	"encoding/json"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Media types of the artifact (docs/oci.md).
const (
	// ArtifactType marks an OCI 1.1 manifest as a dlbundle image.
	ArtifactType = "application/vnd.dlbundle.artifact.v1"
	// LayerMediaType is the .dlimg file itself, byte for byte.
	LayerMediaType types.MediaType = "application/vnd.dlbundle.image.v1+zstd"
	// EmptyConfigMediaType and emptyConfig are the OCI empty descriptor.
	EmptyConfigMediaType types.MediaType = "application/vnd.oci.empty.v1+json"
)

var emptyConfig = []byte("{}")

// Annotation keys on the manifest. Standard OCI keys where one fits.
const (
	AnnotationTitle        = "org.opencontainers.image.title"    // file name of the image (also on the layer)
	AnnotationCreated      = "org.opencontainers.image.created"  // only when the build is reproducible
	AnnotationTOCDigest    = "com.github.dlbundle.toc.digest"    // sha256:HEX of the table of contents
	AnnotationImageSize    = "com.github.dlbundle.image.size"    // bytes of the .dlimg file
	AnnotationContentSize  = "com.github.dlbundle.content.size"  // bytes of bundled file content, uncompressed
	AnnotationEntries      = "com.github.dlbundle.entries"       // paths in the table of contents
	AnnotationPilotCommand = "com.github.dlbundle.pilot.command" // JSON array: argv of the (first) pilot run
	AnnotationVersion      = "com.github.dlbundle.version"       // dlbundle version that built the image
)

// artifactManifest is the OCI 1.1 manifest for one image file.
func artifactManifest(layer v1.Descriptor, annotations map[string]string) ([]byte, error) {
	cfg := v1.Descriptor{
		MediaType: EmptyConfigMediaType,
		Size:      int64(len(emptyConfig)),
		Digest:    emptyConfigDigest(),
		Data:      emptyConfig,
	}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  ArtifactType,
		Config:        cfg,
		Layers:        []v1.Descriptor{layer},
		Annotations:   annotations,
	}
	return json.Marshal(m)
}

func emptyConfigDigest() v1.Hash {
	h, _, _ := v1.SHA256(bytes.NewReader(emptyConfig))
	return h
}

// checkManifest parses a fetched manifest and refuses anything that is not
// a dlbundle artifact, naming what it is instead. It returns the manifest
// and the descriptor of the image layer.
func checkManifest(mediaType types.MediaType, raw []byte) (*v1.Manifest, v1.Descriptor, error) {
	if mediaType.IsIndex() {
		return nil, v1.Descriptor{}, fmt.Errorf("it is an image index (%s), probably a multi-platform container image: %w; "+
			"push a .dlimg with `dlbundle push`", mediaType, ErrNotArtifact)
	}
	if mediaType != types.OCIManifestSchema1 {
		return nil, v1.Descriptor{}, fmt.Errorf("it has a manifest of type %s, not an OCI 1.1 artifact: %w (a container image?)",
			mediaType, ErrNotArtifact)
	}
	var m v1.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, v1.Descriptor{}, fmt.Errorf("its manifest is not valid JSON: %v", err)
	}
	kind := m.ArtifactType
	if kind == "" {
		kind = string(m.Config.MediaType) // OCI 1.1: artifactType defaults to the config's media type
	}
	if kind != ArtifactType {
		return nil, v1.Descriptor{}, fmt.Errorf("it is an artifact of type %q, not %q: %w; "+
			"it was not pushed by `dlbundle push`", kind, ArtifactType, ErrNotArtifact)
	}
	if len(m.Layers) != 1 || m.Layers[0].MediaType != LayerMediaType {
		return nil, v1.Descriptor{}, fmt.Errorf("a dlbundle artifact has exactly one layer of type %s; this one has %d: %w",
			LayerMediaType, len(m.Layers), ErrNotArtifact)
	}
	l := m.Layers[0]
	if l.Digest.Algorithm != "sha256" || len(l.Digest.Hex) != 64 || l.Size <= 0 {
		return nil, v1.Descriptor{}, fmt.Errorf("its image layer has digest %q and size %d; want sha256 and a positive size: %w",
			l.Digest, l.Size, ErrNotArtifact)
	}
	return &m, l, nil
}

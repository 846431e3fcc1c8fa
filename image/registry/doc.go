// Package registry moves .dlimg images to and from OCI registries (Harbor,
// Quay, Zot, GHCR, the CNCF distribution registry, ...) as OCI 1.1 artifacts:
// one manifest with artifactType application/vnd.dlbundle.artifact.v1, the
// empty config, and the .dlimg file as its single layer. docs/oci.md
// describes the layout.
//
// Every operation is bounded in time (Options.Timeout is the longest a
// connection may stall), retries transient failures only, and reports
// failures as errors that name the registry, the reference and the fix.
// Fetch writes to a temporary file and renames it only after the sha256 of
// what arrived matches the manifest, so nothing partial is ever left behind.
//
// The package knows the image's insides only through the image package's
// reader (for annotations on push and the table of contents on inspect).
package registry

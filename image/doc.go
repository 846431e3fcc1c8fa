// Package image owns the .dlimg format (docs/SPEC.md): the writer that packs a
// load plan into zstd frames of a cpio newc stream with a table of contents and
// footer, the reader that validates and serves it (lookup, extraction,
// verification), and the OCI registry transport.
//
// It must not decide what is bundled (package squash) and must trust nothing it
// reads: every offset, size, name and digest in an image is checked.
package image

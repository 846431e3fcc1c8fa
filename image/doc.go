// Package image owns the .dlimg format (docs/SPEC.md): the writer that packs a
// load plan into zstd frames of a cpio newc stream with a table of contents and
// footer, the reader that validates and serves it (lookup, extraction,
// verification), and the OCI registry transport (image/registry).
//
// Files: format.go (footer, limits), toc.go (the binary TOC: header, records,
// encoder and decoder), open.go (Open: the checks, Lookup), write.go and
// arch.go (the writer), decode.go (parallel frame decoding within a memory
// budget), extract.go and dirtree.go (extraction relative to directory
// descriptors), stream.go and archive.go (the cpio stream checked against the
// TOC), content.go (one object's content).
//
// It must not decide what is bundled (package squash) and must trust nothing it
// reads: every offset, size, name and digest in an image is checked, every
// count is known and bounded before it is allocated, and nothing is written
// outside an extraction's directory whatever another user does meanwhile.
package image

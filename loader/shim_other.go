//go:build !amd64 && !arm64

package loader

// No shim is built for this architecture (shim/build.sh): exec refuses to run
// (writeShim).
var shimAuditObject, shimPreloadObject, shimPreload234Object []byte

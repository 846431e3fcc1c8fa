//go:build !amd64 && !arm64

package stagefmt

// No shim is built for this architecture (shim/build.sh): exec refuses to run
// (WriteShim).
var shimAuditObject, shimPreloadObject, shimPreload234Object []byte

var shimRealNames string

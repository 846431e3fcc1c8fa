package loader

import _ "embed"

// The shim objects for arm64 (shim/build.sh).

//go:embed shim/arm64/audit.so
var shimAuditObject []byte

//go:embed shim/arm64/preload.so
var shimPreloadObject []byte

//go:embed shim/arm64/preload-2.34.so
var shimPreload234Object []byte

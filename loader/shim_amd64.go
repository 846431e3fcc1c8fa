package loader

import _ "embed"

// The shim objects for amd64 (shim/build.sh).

//go:embed shim/amd64/audit.so
var shimAuditObject []byte

//go:embed shim/amd64/preload.so
var shimPreloadObject []byte

//go:embed shim/amd64/preload-2.34.so
var shimPreload234Object []byte

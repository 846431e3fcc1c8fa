// Package amd64 embeds the loader shim's objects for amd64 that
// loader/shim/build.sh writes beside this file (`make shim`, i.e.
// `go generate ./loader/`; the objects are committed). The embed lives
// here because go:embed reaches no file above its package's directory:
// package stagefmt, which puts the objects into every stage, imports the
// package of the architecture it is built for (stagefmt/shim_amd64.go).
package amd64

import _ "embed"

// Audit is audit.so (LD_AUDIT).
//
//go:embed audit.so
var Audit []byte

// Preload is preload.so (LD_PRELOAD, glibc 2.17 and later).
//
//go:embed preload.so
var Preload []byte

// Preload234 is preload-2.34.so (LD_PRELOAD, glibc 2.34 and later).
//
//go:embed preload-2.34.so
var Preload234 []byte

// RealNames lists the functions the preload forwards to (intercept.h's
// SHIM_FUNCS), one per line, in the table's order (build.sh).
//
//go:embed realnames
var RealNames string

// Package loader owns what happens on a compute node: staging an image into a
// node-local directory once per node (lock, parallel decompression, digest
// checks, atomic publication), writing the lookup table that the C preload
// shim maps, and exec of the app with the shim in its environment.
//
// The shim itself (shim/*.c) is the only code that runs inside the app; it is
// compiled by `go generate` and embedded. This package must not touch the
// shared file system more than reading the image once per node.
package loader

package loader

// The C shim (shim/*.c) is compiled by `go generate ./loader/` (`make
// shim`) for amd64 and arm64 into shim/amd64 and shim/arm64, and the
// objects are committed, so that `go install` works without a C compiler
// (cilium/ebpf's bpf2go convention). The directive stays beside the sources;
// the objects are embedded by the Go packages in those two directories and
// written into each stage by package stagefmt. TestShimObjectsUpToDate fails
// when the sources changed and the objects were not regenerated.
//
//go:generate sh shim/build.sh

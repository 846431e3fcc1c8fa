package loader

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
)

// The C shim (loader/shim/*.c) is compiled by `go generate ./loader/` and the
// objects are committed, so that `go install` works without a C compiler
// (cilium/ebpf's bpf2go convention). TestShimObjectsUpToDate fails when the
// sources changed and the objects were not regenerated.
//
//go:generate sh shim/build.sh

//go:embed shim/audit.so
var shimAuditObject []byte

//go:embed shim/preload.so
var shimPreloadObject []byte

// writeShim writes the shim objects into dir (created).
func writeShim(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("materialize: %w", err)
	}
	for name, obj := range map[string][]byte{shimAuditName: shimAuditObject, shimPreload: shimPreloadObject} {
		if err := os.WriteFile(filepath.Join(dir, name), obj, 0o555); err != nil {
			return fmt.Errorf("materialize: write shim: %w", err)
		}
	}
	return nil
}

// stageDirMax is the longest stage directory whose stages the shim can use:
// DLBUNDLE_STAGE (<dir>/sha256-<64 hex>) may be at most DLB_STAGE_MAX (1000,
// loader/shim/table.h) bytes, the size of the shim's fixed buffers.
const stageDirMax = 1000 - len("/sha256-") - 64

// checkStagePath refuses a stage directory too long for the shim, which
// would otherwise run the app with the shim inactive (reading the original
// files) after staging.
func checkStagePath(dir string) error {
	if len(dir) > stageDirMax {
		return fmt.Errorf("stage dir %.60s... is %d bytes long; the loader shim accepts at most %d; use a shorter --stage-dir",
			dir, len(dir), stageDirMax)
	}
	return nil
}

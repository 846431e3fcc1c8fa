package stagefmt

import (
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
)

// The C shim (loader/shim/*.c) is compiled by `make shim` (go generate
// ./loader/) for amd64 and arm64 into loader/shim/amd64 and loader/shim/arm64,
// whose Go packages embed them; the objects are committed, so that `go
// install` works without a C compiler (cilium/ebpf's bpf2go convention).
// shim_<arch>.go takes this architecture's. TestShimObjectsUpToDate
// (package loader) fails when the sources changed and the objects were not
// regenerated.

// ShimObjects are the files of <stage>/shim.
var ShimObjects = map[string][]byte{
	AuditObject:      shimAuditObject,
	PreloadObject:    shimPreloadObject,
	Preload234Object: shimPreload234Object,
}

// WriteShim writes the shim objects into dir (created), the shim directory
// of a stage whose tree and table are complete, and records there which
// preload build this node's processes load (PreloadChoice): WriteShimObjects
// then RecordPreload.
func WriteShim(dir string) error {
	if err := WriteShimObjects(dir); err != nil {
		return err
	}
	return RecordPreload(dir)
}

// WriteShimObjects writes the shim objects into dir (created), the shim
// directory of a stage. They depend on nothing of the image: staging writes
// them first, so that the probe of the node's ld.so, which lists audit.so,
// runs while the image is extracted.
func WriteShimObjects(dir string) error {
	if len(shimAuditObject) == 0 {
		return fmt.Errorf("materialize: dlbundle has no loader shim for linux/%s (amd64 and arm64 only)", runtime.GOARCH)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("materialize: %w", err)
	}
	for name, obj := range ShimObjects {
		if err := os.WriteFile(filepath.Join(dir, name), obj, 0o555); err != nil {
			return fmt.Errorf("materialize: write shim: %w", err)
		}
	}
	return nil
}

// RecordPreload records in the shim directory dir which preload build this
// node's processes load (PreloadChoice), from the stage's libc: after the
// stage's tree is extracted and its table written.
func RecordPreload(dir string) error {
	choice := DetectPreload(filepath.Dir(dir))
	if err := os.Symlink(choice, filepath.Join(dir, PreloadChoice)); err != nil {
		return fmt.Errorf("materialize: record the preload build: %w", err)
	}
	return nil
}

// PreloadFor names the preload object for this node in the stage's shim
// directory: the one recorded at staging (PreloadChoice), which costs
// every rank one readlink; a stage written by an older dlbundle has no
// record, and then it is detected as at staging. Parsing the libc's ELF
// version table on every exec cost ~120 page faults (~3 ms), a tenth of
// exec's whole cost on a warm stage (docs/bench/cli.md).
func PreloadFor(stageDir string) string {
	if name, err := os.Readlink(filepath.Join(stageDir, ShimDir, PreloadChoice)); err == nil &&
		(name == PreloadObject || name == Preload234Object) {
		return name
	}
	return DetectPreload(stageDir)
}

// DetectPreload chooses the preload build for the libc that the stage's
// processes will use on this node. Two builds exist (loader/shim/build.sh):
// preload.so loads on glibc 2.17 and later but needs libdl.so.2, which every
// process then loads (an object the app did not ask for: a file opened per
// process, an extra entry in dl_iterate_phdr); preload-2.34.so needs only
// libc.so.6, where glibc 2.34 and later define dlsym. A stage written by an
// older dlbundle may have only preload.so.
func DetectPreload(stageDir string) string {
	if _, err := os.Lstat(filepath.Join(stageDir, ShimDir, Preload234Object)); err != nil {
		return PreloadObject
	}
	f, err := openLibc(stageDir)
	if err != nil {
		return PreloadObject
	}
	defer f.Close()
	if libcDefinesIn(f, "GLIBC_2.34") {
		return Preload234Object
	}
	return PreloadObject
}

// openLibc opens the libc.so.6 the app's processes will use: the one beside
// the dynamic linker that the kernel loads for this architecture's programs
// (glibc installs the two together, and they must be of one glibc version).
// When the image bundles it, ld.so is answered with the staged copy, so that
// copy is read (node-local; no operation on the original), below the staged
// root only (the image decides its symlinks: stagedtree.go); else the
// node's own.
func openLibc(stageDir string) (*os.File, error) {
	if libc, ok := stagedLibc(stageDir); ok {
		tree, err := openStagedTree(filepath.Join(stageDir, RootDir))
		if err != nil {
			return nil, err
		}
		defer tree.Close()
		return tree.open(libc)
	}
	return os.Open(NodeLibc())
}

// stagedLibc returns the image path of the libc.so.6 beside the dynamic
// linker when the stage's table bundles both.
func stagedLibc(stageDir string) (string, bool) {
	tab, release, err := MapTable(stageDir)
	if err != nil {
		return "", false
	}
	defer release()
	if final, ok := ResolveFile(tab, DynamicLinker()); ok {
		return ResolveFile(tab, filepath.Join(filepath.Dir(final), "libc.so.6"))
	}
	return "", false
}

// NodeLibc returns the node's libc.so.6: beside the node's dynamic linker.
func NodeLibc() string {
	if DynamicLinker() == "" {
		return ""
	}
	if real, err := filepath.EvalSymlinks(DynamicLinker()); err == nil {
		return filepath.Join(filepath.Dir(real), "libc.so.6")
	}
	return ""
}

// DynamicLinker is the node's ld.so: the PT_INTERP of every dynamically
// linked program of this architecture, "" for one the shim is not built for.
func DynamicLinker() string {
	switch runtime.GOARCH {
	case "amd64":
		return "/lib64/ld-linux-x86-64.so.2"
	case "arm64":
		return "/lib/ld-linux-aarch64.so.1"
	}
	return ""
}

// LibcDefines reports whether the shared object at path defines the symbol
// version ver (false if it cannot be read: then the build that loads
// everywhere is used).
func LibcDefines(path, ver string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	return libcDefinesIn(f, ver)
}

// libcDefinesIn is LibcDefines of an open file. The file may be an image's
// (hostile bytes, read as root while staging): debug/elf bounds what it
// allocates by the file's size, and FuzzLibcDefines checks that no input
// makes it panic.
func libcDefinesIn(r io.ReaderAt, ver string) bool {
	f, err := elf.NewFile(r)
	if err != nil {
		return false
	}
	vs, err := f.DynamicVersions()
	if err != nil {
		return false
	}
	for _, v := range vs {
		if v.Name == ver {
			return true
		}
	}
	return false
}

// StageDirMax is the longest stage directory whose stages the shim can use:
// DLBUNDLE_STAGE (<dir>/sha256-<64 hex>) may be at most DLB_STAGE_MAX (1000,
// loader/shim/table.h) bytes, the size of the shim's fixed buffers.
const StageDirMax = 1000 - len("/sha256-") - 64

// CheckStagePath refuses a stage directory too long for the shim, which
// would otherwise run the app with the shim inactive (reading the original
// files) after staging.
func CheckStagePath(dir string) error {
	if len(dir) > StageDirMax {
		return fmt.Errorf("stage dir %.60s... is %d bytes long; the loader shim accepts at most %d; use a shorter --stage-dir",
			dir, len(dir), StageDirMax)
	}
	return nil
}

package loader

// Stage layout (docs/loader.md). The staged copy of an original path P is
// always <stage>/root + P: the shim computes it by concatenation.
const (
	stageRootDir  = "root"       // the extracted tree
	stageTable    = "table"      // the lookup table
	stageSearch   = "search"     // this node's ld.so search rules (ldsearch.go)
	stageShimDir  = "shim"       // the shim objects
	shimAuditName = "audit.so"   // LD_AUDIT
	shimPreload   = "preload.so" // LD_PRELOAD, glibc 2.17+ (see preloadFor)
	// LD_PRELOAD for glibc 2.34+: needs no libdl.so.2 (see preloadFor)
	shimPreload234 = "preload-2.34.so"
	// symlink to the preload build chosen for this node at staging
	// (preloadFor); absent in stages of older dlbundles
	shimPreloadChoice = "preload"
)

// StageEssentials are the files of a stage (docs/loader.md) without which
// exec cannot start the app: for node.StageRequest.MustHave.
var StageEssentials = []string{stageTable, stageShimDir + "/" + shimAuditName, stageShimDir + "/" + shimPreload}

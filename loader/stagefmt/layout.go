package stagefmt

// Stage layout (docs/loader.md). The staged copy of an original path P is
// always <stage>/root + P: the shim computes it by concatenation.
const (
	RootDir       = "root"       // the extracted tree
	TableFile     = "table"      // the lookup table
	SearchFile    = "search"     // this node's ld.so search rules (node/materialize/ldsearch.go; search.go)
	ShimDir       = "shim"       // the shim objects
	AuditObject   = "audit.so"   // LD_AUDIT
	PreloadObject = "preload.so" // LD_PRELOAD, glibc 2.17+ (see PreloadFor)
	// LD_PRELOAD for glibc 2.34+: needs no libdl.so.2 (see PreloadFor)
	Preload234Object = "preload-2.34.so"
	// symlink to the preload build chosen for this node at staging
	// (PreloadFor); absent in stages of older dlbundles
	PreloadChoice = "preload"
)

// Essentials are the files of a stage (docs/loader.md) without which
// exec cannot start the app: for node.StageRequest.MustHave.
var Essentials = []string{TableFile, ShimDir + "/" + AuditObject, ShimDir + "/" + PreloadObject}

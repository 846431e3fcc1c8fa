package stagefmt

import "github.com/dlbundle/dlbundle/loader/shim/arm64"

// The shim objects for arm64 (loader/shim/build.sh).
var (
	shimAuditObject      = arm64.Audit
	shimPreloadObject    = arm64.Preload
	shimPreload234Object = arm64.Preload234
	shimRealNames        = arm64.RealNames
)

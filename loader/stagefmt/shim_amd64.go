package stagefmt

import "github.com/dlbundle/dlbundle/loader/shim/amd64"

// The shim objects for amd64 (loader/shim/build.sh).
var (
	shimAuditObject      = amd64.Audit
	shimPreloadObject    = amd64.Preload
	shimPreload234Object = amd64.Preload234
	shimRealNames        = amd64.RealNames
)

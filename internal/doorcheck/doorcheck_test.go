package doorcheck

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"
)

// TestDoorcheck: a raw os.ReadFile(p) planted in node/ and in report/ is
// reported with its file, line and the door to use; constant paths,
// fd-relative *at calls, methods on descriptors, test files, unchecked trees
// and allowlisted functions are not.
func TestDoorcheck(t *testing.T) {
	Allowed["node.ownInput"] = "the test's stand-in for an allow.go entry"
	defer delete(Allowed, "node.ownInput")
	analysistest.Run(t, analysistest.TestData(), Analyzer,
		"github.com/dlbundle/dlbundle/node", "github.com/dlbundle/dlbundle/report", "github.com/dlbundle/dlbundle/image")
}

// TestAllowedReasons: every allowlist entry says why.
func TestAllowedReasons(t *testing.T) {
	for k, why := range Allowed {
		if len(why) < 20 {
			t.Errorf("allow.go: %s has no real reason (%q)", k, why)
		}
	}
}

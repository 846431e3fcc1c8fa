package squash

import (
	"os"
	"testing"

	"github.com/dlbundle/dlbundle/trace"
)

// The test binary doubles as the tracer's stub (what `dlbundle __trace-stub`
// does), so that real pilot runs need no built dlbundle.
func TestMain(m *testing.M) {
	trace.BecomeStubIfAsked()
	os.Exit(m.Run())
}

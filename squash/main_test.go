package squash

import (
	"fmt"
	"os"
	"testing"

	"github.com/dlbundle/dlbundle/trace"
)

// The test binary doubles as the tracer's stub (what `dlbundle __trace-stub`
// does), so that real pilot runs need no built dlbundle.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == trace.StubVerb {
		code, err := trace.StubMain(os.Args[3:])
		fmt.Fprintf(os.Stderr, "dlbundle trace: %v\n", err)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

package trace

import (
	"fmt"
	"os"
	"testing"
)

// The test binary doubles as the stub and as a tracer CLI, so that
// `go test ./trace/` needs no built dlbundle:
//
//	trace.test __trace-stub -- CMD ARGS   runs StubMain (what dlbundle __trace-stub does)
//	trace.test __trace-cli OUT -- CMD...  runs Run like `dlbundle trace -o OUT -- CMD` (for signal tests)
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == StubVerb {
		code, err := StubMain(os.Args[3:])
		fmt.Fprintf(os.Stderr, "dlbundle trace: %v\n", err)
		os.Exit(code)
	}
	if len(os.Args) > 3 && os.Args[1] == "__trace-cli" {
		os.Exit(cliMain(os.Args[2], os.Args[4:]))
	}
	os.Exit(m.Run())
}

func cliMain(out string, command []string) int {
	res, err := Run(Options{Command: command, Output: out, Quiet: true, Stub: testStub()})
	if ce, ok := err.(*CommandError); ok {
		fmt.Fprintf(os.Stderr, "dlbundle trace: %v\n", ce)
		return ce.Code
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlbundle trace: %v\n", err)
		return 1
	}
	return res.Exit
}

func testStub() []string {
	self, err := os.Executable()
	if err != nil {
		panic(err)
	}
	return []string{self, StubVerb, "--"}
}

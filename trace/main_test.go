package trace

import (
	"fmt"
	"os"
	"testing"
)

// The test binary doubles as the stub and as a tracer CLI, so that
// `go test ./trace/` needs no built dlbundle:
//
//	trace.test __trace-stub -- CMD ARGS       runs StubMain (what `dlbundle __trace-stub` does)
//	trace.test __trace-cli OUT -- CMD ARGS    runs Run like `dlbundle trace -q -o OUT -- CMD ARGS`
//	trace.test __deny-ptrace OUT -- CMD ARGS  the same under a seccomp filter that refuses ptrace
//	                                          with EPERM (as a container without CAP_SYS_PTRACE does)
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == StubVerb {
		code, err := StubMain(os.Args[3:])
		fmt.Fprintf(os.Stderr, "dlbundle trace: %v\n", err)
		os.Exit(code)
	}
	if len(os.Args) > 3 && os.Args[1] == "__trace-cli" {
		os.Exit(cliMain(os.Args[2], os.Args[4:]))
	}
	if len(os.Args) > 3 && os.Args[1] == "__deny-ptrace" {
		if err := denyPtrace(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(99)
		}
		os.Exit(cliMain(os.Args[2], os.Args[4:]))
	}
	dir, err := os.MkdirTemp("", "dlbundle-trace-fixtures-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fixtureDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
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

package trace

import (
	"fmt"
	"os"
	"runtime"
	"testing"
)

// The test binary doubles as the stub and as a tracer CLI, so that
// `go test ./trace/` needs no built dlbundle:
//
//	trace.test __trace-stub -- CMD ARGS       runs StubMain (what `dlbundle __trace-stub` does)
//	trace.test __trace-stub-thread -- CMD     the same, but execve is called by a thread other than the main one
//	trace.test __trace-cli OUT -- CMD ARGS    runs Run like `dlbundle trace -q -o OUT -- CMD ARGS`
//	trace.test __deny-ptrace OUT -- CMD ARGS  the same under a seccomp filter that refuses ptrace
//	                                          with EPERM (as a container without CAP_SYS_PTRACE does)
func TestMain(m *testing.M) {
	BecomeStubIfAsked()
	if len(os.Args) > 2 && os.Args[1] == "__trace-stub-thread" {
		os.Exit(stubFromThread(os.Args[3:]))
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

// stubFromThread runs StubMain on an OS thread that is certainly not the
// main one (the main goroutine holds that), as the Go scheduler may do in the
// real stub: the kernel then gives the exec'd app the main thread's id.
func stubFromThread(argv []string) int {
	runtime.LockOSThread()
	code := make(chan int)
	go func() {
		runtime.LockOSThread()
		c, err := StubMain(argv)
		fmt.Fprintf(os.Stderr, "dlbundle trace: %v\n", err)
		code <- c
	}()
	return <-code
}

func cliMain(out string, command []string) int {
	res, err := Run(Options{Command: command, Output: out, Quiet: true})
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

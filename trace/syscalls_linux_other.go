//go:build linux && !amd64

package trace

import "golang.org/x/sys/unix"

// The tracer decodes x86_64 system calls only; on other architectures Run
// refuses to start (see errUnsupportedArch).
var syscallTable = map[uint64]scSpec{}

var (
	fdFormFlags  = map[uint64]int{}
	contextCalls = map[uint64]bool{}
)

func syscallArgs(r *unix.PtraceRegs) (nr uint64, args [6]uint64) { return 0, args }

func syscallResult(r *unix.PtraceRegs) int64 { return 0 }

func quietChildStops() (restore func()) { return func() {} }

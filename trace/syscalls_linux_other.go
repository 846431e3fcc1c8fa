//go:build linux && !amd64 && !arm64

package trace

import "golang.org/x/sys/unix"

// The tracer decodes x86_64 and arm64 system calls only; on other
// architectures Run refuses to start (an empty syscallTable).
type regs = x86Regs

var (
	syscallTable = map[uint64]scSpec{}
	fdFormFlags  = map[uint64]int{}
	contextCalls = map[uint64]bool{}
	nativeFilter = filterArch{}
	trapCode     []byte
)

const ldso = ""

func getRegs(tid int, r *regs) error    { return unix.ENOSYS }
func setRegs(tid int, r *regs) error    { return unix.ENOSYS }
func injectRegs(tid int, r *regs) error { return unix.ENOSYS }

func quietChildStops() (restore func()) { return func() {} }

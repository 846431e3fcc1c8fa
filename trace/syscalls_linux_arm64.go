package trace

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The arm64 side of the tracer (regs.go says what each architecture gives;
// the table is syscalls_aarch64.go).

// regs are this architecture's registers at a stop.
type regs = arm64Regs

var (
	syscallTable = aarch64Syscalls
	fdFormFlags  = aarch64FdFormFlags
	contextCalls = aarch64ContextCalls
)

// nativeFilter is the seccomp filter's view of arm64 (no x32 ABI; arm32
// calls of a compat process go to the tracer, as i386 ones on x86_64).
var nativeFilter = filterArch{audit: auditArchAarch64,
	syscalls: syscallTable, fdForm: fdFormFlags, context: contextCalls}

// trapCode is what inject.go writes at the entry point.
var trapCode = arm64Trap

// ldso is the ELF interpreter every dynamic arm64 program names (ABI).
const ldso = "/lib/ld-linux-aarch64.so.1"

// getRegs and setRegs are PTRACE_GETREGSET/SETREGSET NT_PRSTATUS (x/sys's
// PtraceGetRegs; arm64 has no PTRACE_GETREGS), whose struct has the layout
// of arm64Regs.
func getRegs(tid int, r *regs) error {
	return unix.PtraceGetRegs(tid, (*unix.PtraceRegs)(unsafe.Pointer(r)))
}
func setRegs(tid int, r *regs) error {
	return unix.PtraceSetRegs(tid, (*unix.PtraceRegs)(unsafe.Pointer(r)))
}

// injectRegs sets registers prepared by setCall, and the number of the
// system call the kernel considers the thread to be in to -1
// (NT_ARM_SYSTEM_CALL; x86's orig_rax): nothing is restarted when the
// thread resumes.
func injectRegs(tid int, r *regs) error {
	if err := setRegs(tid, r); err != nil {
		return err
	}
	no := int32(-1)
	iov := unix.Iovec{Base: (*byte)(unsafe.Pointer(&no)), Len: 4}
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SETREGSET, uintptr(tid), unix.NT_ARM_SYSTEM_CALL,
		uintptr(unsafe.Pointer(&iov)), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// The two layouts are one size (checked at compile time).
var _ [unsafe.Sizeof(unix.PtraceRegs{}) - unsafe.Sizeof(regs{})]byte
var _ [unsafe.Sizeof(regs{}) - unsafe.Sizeof(unix.PtraceRegs{})]byte

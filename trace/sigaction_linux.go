//go:build amd64 || arm64

package trace

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// saNoCldStop is SA_NOCLDSTOP (asm-generic/signal.h).
const saNoCldStop = 1

// kernelSigaction is struct sigaction as rt_sigaction(2) takes it on x86_64
// and arm64 (both define SA_RESTORER: handler, flags, restorer, mask).
type kernelSigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

// quietChildStops adds SA_NOCLDSTOP to the SIGCHLD action (the Go runtime's
// handler stays): every ptrace stop of a tracee would otherwise send this
// process a SIGCHLD, and handling them cost about a sixth of the tracer's
// time. wait4 is woken for stops either way. It returns the undo.
func quietChildStops() (restore func()) {
	var old kernelSigaction
	if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(unix.SIGCHLD), 0,
		uintptr(unsafe.Pointer(&old)), 8, 0, 0); e != 0 {
		return func() {}
	}
	quiet := old
	quiet.flags |= saNoCldStop
	if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(unix.SIGCHLD),
		uintptr(unsafe.Pointer(&quiet)), 0, 8, 0, 0); e != 0 {
		return func() {}
	}
	return func() {
		unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(unix.SIGCHLD), uintptr(unsafe.Pointer(&old)), 0, 8, 0, 0)
	}
}

package trace

import (
	"errors"
	"fmt"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Installing the filter without a stub: the app is started directly under
// PTRACE_TRACEME and stops right after its execve, before its first
// instruction. There the tracer makes the app itself call
// prctl(PR_SET_NO_NEW_PRIVS) and seccomp(SECCOMP_SET_MODE_FILTER, TSYNC) — it
// writes the filter below the stack pointer, a system call instruction and
// a breakpoint over the entry point (`syscall; int3`, `svc #0; brk #0`),
// runs it once per call and puts code and registers back. This spares a
// second start of the (large, static) dlbundle binary that re-executing
// itself as a stub costs, the bulk of a pilot's fixed cost. What the app sees
// is the same as under the stub: the filter, no_new_privs, and its own
// registers and memory at its entry point.

// Arguments of the injected calls (the numbers are unix.SYS_PRCTL and
// unix.SYS_SECCOMP of the architecture).
const (
	prSetNoNewPrivs        = 38
	seccompSetModeFilter   = 1
	seccompFilterFlagTSync = 1
)

// sockFprog is the kernel's struct sock_fprog on a 64-bit app (the tracer's
// own architecture and byte order): the filter's length, then its address in
// the app, not in this process (so not unix.SockFprog, whose Filter is a Go
// pointer).
type sockFprog struct {
	Len    uint16
	_      [6]byte
	Filter uint64
}

// Exactly 16 bytes, as the layout below assumes (either array length is
// negative otherwise, and the build fails).
var (
	_ [16 - unsafe.Sizeof(sockFprog{})]struct{}
	_ [unsafe.Sizeof(sockFprog{}) - 16]struct{}
)

// injectFilter installs prog in tid, stopped at its first instruction after
// execve. Signals that arrive meanwhile are returned to be delivered after.
func injectFilter(tid int, prog []unix.SockFilter) (pending []unix.Signal, err error) {
	var saved regs
	if err := getRegs(tid, &saved); err != nil {
		return nil, err
	}
	// The filter and its struct sock_fprog, 8 KiB below the stack pointer
	// (the kernel maps 128 KiB of stack below the arguments at execve).
	size := len(prog) * int(unsafe.Sizeof(unix.SockFilter{}))
	addr := (saved.sp() - 8192 - uint64(size) - 16) &^ 15
	head := sockFprog{Len: uint16(len(prog)), Filter: addr + 16}
	fprog := make([]byte, 16+size)
	copy(fprog, unsafe.Slice((*byte)(unsafe.Pointer(&head)), unsafe.Sizeof(head)))
	copy(fprog[16:], unsafe.Slice((*byte)(unsafe.Pointer(&prog[0])), size))
	if err := pokeMem(tid, addr, fprog); err != nil {
		// /proc/TID/mem not writable here (a read-only /proc): word by word.
		if _, err := unix.PtracePokeData(tid, uintptr(addr), fprog); err != nil {
			return nil, fmt.Errorf("writing the filter into the app: %w", err)
		}
	}
	// The system call instruction and a breakpoint (trapCode) over the entry
	// point; the breakpoint stops the app after each call.
	var orig [8]byte
	if _, err := unix.PtracePeekText(tid, uintptr(saved.pc()), orig[:]); err != nil {
		return nil, err
	}
	code := orig
	copy(code[:], trapCode)
	if _, err := unix.PtracePokeText(tid, uintptr(saved.pc()), code[:]); err != nil {
		return nil, err
	}
	call := func(nr, a0, a1, a2 uint64) error {
		r := saved
		r.setCall(nr, a0, a1, a2)
		if err := injectRegs(tid, &r); err != nil {
			return err
		}
		if err := unix.PtraceCont(tid, 0); err != nil {
			return err
		}
		for {
			var ws unix.WaitStatus
			if _, err := unix.Wait4(tid, &ws, unix.WALL, nil); err != nil {
				if err == unix.EINTR {
					continue
				}
				return err
			}
			if !ws.Stopped() {
				return errors.New("the app ended while the filter was being installed")
			}
			if s := ws.StopSignal(); s != unix.SIGTRAP {
				pending = append(pending, s) // delivered once the app runs its own code
				if err := unix.PtraceCont(tid, 0); err != nil {
					return err
				}
				continue
			}
			break
		}
		if err := getRegs(tid, &r); err != nil {
			return err
		}
		if e := r.result(); e < 0 {
			return unix.Errno(-e)
		}
		return nil
	}
	if err = call(unix.SYS_PRCTL, prSetNoNewPrivs, 1, 0); err != nil {
		err = fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS) in the app: %w", err)
	} else if err = call(unix.SYS_SECCOMP, seccompSetModeFilter, seccompFilterFlagTSync, addr); err != nil {
		err = fmt.Errorf("installing the seccomp filter in the app: %w", err)
	}
	if _, rerr := unix.PtracePokeText(tid, uintptr(saved.pc()), orig[:]); rerr != nil && err == nil {
		err = rerr
	}
	if rerr := setRegs(tid, &saved); rerr != nil && err == nil {
		err = rerr
	}
	return pending, err
}

// pokeMem writes b at addr in tid through /proc/TID/mem: one write instead
// of a PTRACE_POKEDATA per 8 bytes (~64 calls). Like PTRACE_POKEDATA, and
// unlike process_vm_writev, it grows the stack when addr is below its
// mapping, which is the case after an execve whose argument pointers filled
// the 128 KiB the kernel maps below the arguments (100,000 arguments).
func pokeMem(tid int, addr uint64, b []byte) error {
	fd, err := unix.Open("/proc/"+strconv.Itoa(tid)+"/mem", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	n, err := unix.Pwrite(fd, b, int64(addr))
	if err == nil && n != len(b) {
		err = fmt.Errorf("%d of %d bytes written", n, len(b))
	}
	return err
}

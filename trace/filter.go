package trace

import (
	"fmt"
	"sort"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The seccomp filter is assembled here with golang.org/x/net/bpf, to the
// instructions go-seccomp-bpf produces for the same policy (a default of
// allow, one group with the trace action; TestFilterMatchesGoSeccompBPF
// compares them). The library itself is not linked: its arch package builds
// syscall name tables for every architecture in its init, 0.59 ms and 137 KB
// at every start of dlbundle (exec ranks included), for the 60 numbers the
// tracer already has in syscallTable.

// seccomp_data offsets and return values (linux/seccomp.h, linux/audit.h).
const (
	seccompDataNr    = 0
	seccompDataArch  = 4
	seccompDataArgs  = 16
	auditArchX86_64  = 0xc000003e // AUDIT_ARCH_X86_64; AUDIT_ARCH_AARCH64: syscalls_aarch64.go
	x32SyscallBit    = 0x40000000
	seccompRetAllow  = 0x7fff0000
	seccompRetTrace  = 0x7ff00000
	seccompRetErrno  = 0x00050000
	seccompRetENOSYS = seccompRetErrno | uint32(unix.ENOSYS)
)

// filterCall is one system call the filter sends to the tracer; emptyPath
// names the flags argument of the stat calls whose AT_EMPTY_PATH form (fstat)
// is let through, or is -1.
type filterCall struct {
	nr        uint32
	emptyPath int
}

// filterArch is what the filter needs of an architecture: its audit arch
// (seccomp_data.arch), whether x32 calls exist (x86_64), and its tables.
// nativeFilter (syscalls_linux_<arch>.go) is this machine's.
type filterArch struct {
	audit    uint32
	x32      bool
	syscalls map[uint64]scSpec
	fdForm   map[uint64]int
	context  map[uint64]bool
}

// filterCalls lists the filtered calls of this machine.
func filterCalls() []filterCall { return nativeFilter.calls() }

// calls lists the filtered calls in the order the filter tests them: the
// unconditional ones by number, then the conditional ones by number (the
// order go-seccomp-bpf gives names, then names with conditions).
func (a *filterArch) calls() []filterCall {
	var plain, cond []filterCall
	add := func(nr uint64) {
		if arg, ok := a.fdForm[nr]; ok {
			cond = append(cond, filterCall{uint32(nr), arg})
		} else {
			plain = append(plain, filterCall{uint32(nr), -1})
		}
	}
	for nr := range a.syscalls {
		add(nr)
	}
	for nr := range a.context {
		add(nr)
	}
	byNr := func(s []filterCall) { sort.Slice(s, func(i, j int) bool { return s[i].nr < s[j].nr }) }
	byNr(plain)
	byNr(cond)
	return append(plain, cond...)
}

// filterProgram assembles this machine's filter.
func filterProgram() ([]unix.SockFilter, error) { return nativeFilter.program() }

// program assembles the filter: the calls of a.calls stop in the tracer
// (SECCOMP_RET_TRACE), x32 calls fail with ENOSYS, all others run, other
// architectures' calls too (i386 via int 0x80 on x86_64, arm32 of a compat
// process on arm64: untraced, as in go-seccomp-bpf's program for the policy).
func (a *filterArch) program() ([]unix.SockFilter, error) {
	calls := a.calls()
	var body []bpf.Instruction
	// Jumps to the trace return are patched once its index is known.
	var toAction []int
	for _, c := range calls {
		if c.emptyPath < 0 {
			toAction = append(toAction, len(body))
			body = append(body, bpf.JumpIf{Cond: bpf.JumpEqual, Val: c.nr})
			continue
		}
		// nr != c.nr: to the next call's test; the test of the flags' high
		// word (jset #0, as go-seccomp-bpf writes it) never jumps;
		// AT_EMPTY_PATH: to the next call's test too (the allow return
		// after the last); else trace.
		lo := uint32(seccompDataArgs + 8*c.emptyPath) // little endian
		body = append(body,
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: c.nr, SkipTrue: 4},
			bpf.LoadAbsolute{Off: lo + 4, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: 0, SkipTrue: 2},
			bpf.LoadAbsolute{Off: lo, Size: 4},
		)
		toAction = append(toAction, len(body))
		body = append(body, bpf.JumpIf{Cond: bpf.JumpBitsNotSet, Val: atEmptyPath})
	}
	action := len(body) + 1
	body = append(body, bpf.RetConstant{Val: seccompRetAllow}, bpf.RetConstant{Val: seccompRetTrace})
	for _, i := range toAction {
		j := body[i].(bpf.JumpIf)
		skip := action - i - 1
		if skip > 255 {
			return nil, fmt.Errorf("seccomp filter: jump of %d instructions (more than 255)", skip)
		}
		j.SkipTrue = uint8(skip) // a false test falls through to the next call's test
		body[i] = j
	}
	var x32 []bpf.Instruction
	if a.x32 {
		x32 = []bpf.Instruction{
			bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32SyscallBit, SkipFalse: 1},
			bpf.RetConstant{Val: seccompRetENOSYS},
		}
	}
	skip := len(x32) + len(body) - 1
	if skip > 255 {
		return nil, fmt.Errorf("seccomp filter: %d instructions, more than one jump spans", skip)
	}
	prog := append([]bpf.Instruction{
		bpf.LoadAbsolute{Off: seccompDataArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: a.audit, SkipTrue: uint8(skip)},
		bpf.LoadAbsolute{Off: seccompDataNr, Size: 4},
	}, append(x32, body...)...)
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, err
	}
	out := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		out[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return out, nil
}

// loadFilter sets no_new_privs and installs prog for every thread of the
// calling process (SECCOMP_FILTER_FLAG_TSYNC), as the stub does before it
// execs the app.
func loadFilter(prog []unix.SockFilter) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, seccompSetModeFilter, seccompFilterFlagTSync,
		uintptr(unsafe.Pointer(&fprog))); e != 0 {
		return e
	}
	return nil
}

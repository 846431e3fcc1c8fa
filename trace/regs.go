package trace

// What the tracer needs of a stopped thread's registers, per architecture
// (one small interface): the system call it entered at a seccomp stop
// (number and six arguments), its result at the exit stop, where the thread
// is (pc, sp), and how to make its next system call instruction call
// something else (inject.go). x86Regs and arm64Regs are the kernel's layouts
// that PTRACE_GETREGSET NT_PRSTATUS fills (x86_64 user_regs_struct, arm64
// user_pt_regs); both are defined on every architecture so that the decoding
// of each is tested on any machine (regs_test.go). The architecture's own
// file (syscalls_linux_<arch>.go) names one of them `regs` and gives the
// system call table, the seccomp audit arch and the injected instructions.
type archRegs interface {
	syscall() (nr uint64, args [6]uint64) // at a seccomp (syscall-entry) stop
	result() int64                        // at the syscall-exit stop: the value or -errno
	pc() uint64
	sp() uint64
	// setCall prepares the registers so that executing a system call
	// instruction calls nr(a0, a1, a2) (and, restored, nothing is restarted).
	setCall(nr, a0, a1, a2 uint64)
}

var (
	_ archRegs = (*x86Regs)(nil)
	_ archRegs = (*arm64Regs)(nil)
)

// x86Regs is struct user_regs_struct (arch/x86/include/asm/user_64.h). The
// System V x86-64 syscall ABI: rax is the number (orig_rax keeps it at a
// stop, since rax then holds -ENOSYS), rdi, rsi, rdx, r10, r8, r9 the
// arguments, rax the result.
type x86Regs struct {
	R15, R14, R13, R12, Rbp, Rbx, R11, R10, R9, R8, Rax, Rcx, Rdx, Rsi, Rdi uint64
	OrigRax, Rip, Cs, Eflags, Rsp, Ss, FsBase, GsBase, Ds, Es, Fs, Gs       uint64
}

func (r *x86Regs) syscall() (uint64, [6]uint64) {
	return r.OrigRax, [6]uint64{r.Rdi, r.Rsi, r.Rdx, r.R10, r.R8, r.R9}
}
func (r *x86Regs) result() int64 { return int64(r.Rax) }
func (r *x86Regs) pc() uint64    { return r.Rip }
func (r *x86Regs) sp() uint64    { return r.Rsp }

// setCall: orig_rax -1 tells the kernel the thread is in no system call, so
// that it restarts nothing when the registers are set at a stop inside one.
func (r *x86Regs) setCall(nr, a0, a1, a2 uint64) {
	r.Rax, r.OrigRax, r.Rdi, r.Rsi, r.Rdx = nr, ^uint64(0), a0, a1, a2
}

// x86Trap is `syscall; int3`.
var x86Trap = []byte{0x0f, 0x05, 0xcc}

// arm64Regs is struct user_pt_regs (arch/arm64/include/uapi/asm/ptrace.h):
// x0-x30, sp, pc, pstate. The AArch64 Linux syscall ABI: x8 is the number,
// x0-x5 the arguments, x0 the result. (At a syscall stop the kernel shows x7
// as 0 or 1, entry or exit, in place of the thread's x7; the tracer does not
// use it. The number the kernel will run is regs->syscallno, which the
// NT_ARM_SYSTEM_CALL regset reads and writes: syscalls_linux_arm64.go.)
type arm64Regs struct {
	X              [31]uint64
	Sp, Pc, Pstate uint64
}

func (r *arm64Regs) syscall() (uint64, [6]uint64) {
	return r.X[8], [6]uint64{r.X[0], r.X[1], r.X[2], r.X[3], r.X[4], r.X[5]}
}
func (r *arm64Regs) result() int64 { return int64(r.X[0]) }
func (r *arm64Regs) pc() uint64    { return r.Pc }
func (r *arm64Regs) sp() uint64    { return r.Sp }

// setCall: the syscall number the kernel would restart lives outside
// user_pt_regs on arm64; injectRegs sets it to -1 through
// NT_ARM_SYSTEM_CALL.
func (r *arm64Regs) setCall(nr, a0, a1, a2 uint64) {
	r.X[8], r.X[0], r.X[1], r.X[2] = nr, a0, a1, a2
}

// arm64Trap is `svc #0; brk #0` (little endian).
var arm64Trap = []byte{0x01, 0x00, 0x00, 0xd4, 0x00, 0x00, 0x20, 0xd4}

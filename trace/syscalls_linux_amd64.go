package trace

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The x86_64 side of the tracer (regs.go says what each architecture gives).

// regs are this architecture's registers at a stop.
type regs = x86Regs

// nativeFilter is the seccomp filter's view of x86_64.
var nativeFilter = filterArch{audit: auditArchX86_64, x32: true,
	syscalls: syscallTable, fdForm: fdFormFlags, context: contextCalls}

// trapCode is what inject.go writes at the entry point.
var trapCode = x86Trap

// ldso is the ELF interpreter every dynamic x86_64 program names (ABI).
const ldso = "/lib64/ld-linux-x86-64.so.2"

// getRegs and setRegs are PTRACE_GETREGSET/SETREGSET NT_PRSTATUS (x/sys's
// PtraceGetRegs), whose struct has the layout of x86Regs.
func getRegs(tid int, r *regs) error {
	return unix.PtraceGetRegs(tid, (*unix.PtraceRegs)(unsafe.Pointer(r)))
}
func setRegs(tid int, r *regs) error {
	return unix.PtraceSetRegs(tid, (*unix.PtraceRegs)(unsafe.Pointer(r)))
}

// injectRegs sets registers prepared by setCall (orig_rax -1: no restart).
func injectRegs(tid int, r *regs) error { return setRegs(tid, r) }

// The two layouts are one size (checked at compile time).
var _ [unsafe.Sizeof(unix.PtraceRegs{}) - unsafe.Sizeof(regs{})]byte
var _ [unsafe.Sizeof(regs{}) - unsafe.Sizeof(unix.PtraceRegs{})]byte

// The system calls the seccomp filter sends to the tracer (x86_64 numbers),
// and where each keeps its arguments. Everything else runs untraced.
var syscallTable = map[uint64]scSpec{
	unix.SYS_OPEN:       {name: "open", op: OpOpen, path: a0, flags: a1},
	unix.SYS_OPENAT:     {name: "openat", op: OpOpen, dirfd: a0, path: a1, flags: a2},
	unix.SYS_OPENAT2:    {name: "openat2", op: OpOpen, dirfd: a0, path: a1, howArg: a2},
	unix.SYS_CREAT:      {name: "creat", op: OpOpen, path: a0, fixedFlags: unix.O_CREAT | unix.O_WRONLY | unix.O_TRUNC},
	unix.SYS_STAT:       {name: "stat", op: OpStat, path: a0},
	unix.SYS_LSTAT:      {name: "lstat", op: OpStat, path: a0, fixedFlags: unix.AT_SYMLINK_NOFOLLOW},
	unix.SYS_NEWFSTATAT: {name: "newfstatat", op: OpStat, dirfd: a0, path: a1, flags: a3},
	unix.SYS_STATX:      {name: "statx", op: OpStat, dirfd: a0, path: a1, flags: a2},
	unix.SYS_ACCESS:     {name: "access", op: OpAccess, path: a0},
	unix.SYS_FACCESSAT:  {name: "faccessat", op: OpAccess, dirfd: a0, path: a1},
	unix.SYS_FACCESSAT2: {name: "faccessat2", op: OpAccess, dirfd: a0, path: a1, flags: a3},
	unix.SYS_READLINK:   {name: "readlink", op: OpReadlink, path: a0, outBuf: a1},
	unix.SYS_READLINKAT: {name: "readlinkat", op: OpReadlink, dirfd: a0, path: a1, outBuf: a2},
	unix.SYS_EXECVE:     {name: "execve", op: OpExec, path: a0},
	unix.SYS_EXECVEAT:   {name: "execveat", op: OpExec, dirfd: a0, path: a1, flags: a4},
	unix.SYS_CHDIR:      {name: "chdir", op: OpChdir, path: a0},
	unix.SYS_FCHDIR:     {name: "fchdir", op: OpChdir, fdArg: a0},
	unix.SYS_GETDENTS64: {name: "getdents64", op: OpListdir, fdArg: a0, outBuf: a1},
	unix.SYS_MKDIR:      {name: "mkdir", op: OpMkdir, path: a0},
	unix.SYS_MKDIRAT:    {name: "mkdirat", op: OpMkdir, dirfd: a0, path: a1},
	unix.SYS_MKNOD:      {name: "mknod", op: OpMknod, path: a0},
	unix.SYS_MKNODAT:    {name: "mknodat", op: OpMknod, dirfd: a0, path: a1},
	unix.SYS_RMDIR:      {name: "rmdir", op: OpRmdir, path: a0},
	unix.SYS_UNLINK:     {name: "unlink", op: OpUnlink, path: a0},
	unix.SYS_UNLINKAT:   {name: "unlinkat", op: OpUnlink, dirfd: a0, path: a1, flags: a2},
	unix.SYS_RENAME:     {name: "rename", op: OpRename, path: a0, path2: a1},
	unix.SYS_RENAMEAT:   {name: "renameat", op: OpRename, dirfd: a0, path: a1, dirfd2: a2, path2: a3},
	unix.SYS_RENAMEAT2:  {name: "renameat2", op: OpRename, dirfd: a0, path: a1, dirfd2: a2, path2: a3, flags: a4},
	unix.SYS_LINK:       {name: "link", op: OpLink, path: a0, path2: a1},
	unix.SYS_LINKAT:     {name: "linkat", op: OpLink, dirfd: a0, path: a1, dirfd2: a2, path2: a3, flags: a4},
	// symlink(target, linkpath): the new name is the path; the target text is kept as written.
	unix.SYS_SYMLINK:   {name: "symlink", op: OpSymlink, path: a1, rawPath2: a0},
	unix.SYS_SYMLINKAT: {name: "symlinkat", op: OpSymlink, dirfd: a1, path: a2, rawPath2: a0},
	unix.SYS_TRUNCATE:  {name: "truncate", op: OpTruncate, path: a0},
	unix.SYS_CHMOD:     {name: "chmod", op: OpChmod, path: a0},
	unix.SYS_FCHMODAT:  {name: "fchmodat", op: OpChmod, dirfd: a0, path: a1},
	unix.SYS_FCHMODAT2: {name: "fchmodat2", op: OpChmod, dirfd: a0, path: a1, flags: a3},
	unix.SYS_CHOWN:     {name: "chown", op: OpChown, path: a0},
	unix.SYS_LCHOWN:    {name: "lchown", op: OpChown, path: a0, fixedFlags: unix.AT_SYMLINK_NOFOLLOW},
	unix.SYS_FCHOWNAT:  {name: "fchownat", op: OpChown, dirfd: a0, path: a1, flags: a4},
	unix.SYS_UTIME:     {name: "utime", op: OpUtime, path: a0},
	unix.SYS_UTIMES:    {name: "utimes", op: OpUtime, path: a0},
	unix.SYS_FUTIMESAT: {name: "futimesat", op: OpUtime, dirfd: a0, path: a1},
	unix.SYS_UTIMENSAT: {name: "utimensat", op: OpUtime, dirfd: a0, path: a1, flags: a3},
}

// fdFormFlags are the stat calls that glibc also uses as fstat (a path of ""
// with AT_EMPTY_PATH, argument index given): those forms are not lookups and
// are a third of Python's traced calls, so the filter lets them run untraced.
// The price: a lookup that passes AT_EMPTY_PATH with a non-empty path is not
// seen (no known loader or interpreter does that).
var fdFormFlags = map[uint64]int{unix.SYS_NEWFSTATAT: 3, unix.SYS_STATX: 2}

// contextCalls change what a path lookup of the caller returns (credentials,
// root, namespaces): the filter stops them too, and the first one ends
// prediction for the run (predict.go).
var contextCalls = map[uint64]bool{
	unix.SYS_SETUID: true, unix.SYS_SETGID: true, unix.SYS_SETREUID: true, unix.SYS_SETREGID: true,
	unix.SYS_SETRESUID: true, unix.SYS_SETRESGID: true, unix.SYS_SETFSUID: true, unix.SYS_SETFSGID: true,
	unix.SYS_SETGROUPS: true, unix.SYS_CAPSET: true, unix.SYS_CHROOT: true, unix.SYS_PIVOT_ROOT: true,
	unix.SYS_UNSHARE: true, unix.SYS_SETNS: true,
}

package trace

// The system calls the seccomp filter sends to the tracer on arm64, with the
// numbers of the kernel's generic table (include/uapi/asm-generic/unistd.h,
// which arm64 uses), written out so that this table is tested on every
// architecture (against go-seccomp-bpf's aarch64 table; on arm64 against
// x/sys's constants too). arm64 has only the *at forms: no open, stat, lstat,
// access, readlink, mkdir, rename, link, symlink, chmod, chown, utime(s), and
// glibc implements those functions with openat, newfstatat, faccessat,
// readlinkat, mkdirat, renameat(2), linkat, symlinkat, fchmodat, fchownat,
// utimensat. The arguments are in the same positions as on x86_64.
var aarch64Syscalls = map[uint64]scSpec{
	56:  {name: "openat", op: OpOpen, dirfd: a0, path: a1, flags: a2},
	437: {name: "openat2", op: OpOpen, dirfd: a0, path: a1, howArg: a2},
	79:  {name: "newfstatat", op: OpStat, dirfd: a0, path: a1, flags: a3},
	291: {name: "statx", op: OpStat, dirfd: a0, path: a1, flags: a2},
	48:  {name: "faccessat", op: OpAccess, dirfd: a0, path: a1},
	439: {name: "faccessat2", op: OpAccess, dirfd: a0, path: a1, flags: a3},
	78:  {name: "readlinkat", op: OpReadlink, dirfd: a0, path: a1, outBuf: a2},
	221: {name: "execve", op: OpExec, path: a0},
	281: {name: "execveat", op: OpExec, dirfd: a0, path: a1, flags: a4},
	49:  {name: "chdir", op: OpChdir, path: a0},
	50:  {name: "fchdir", op: OpChdir, fdArg: a0},
	61:  {name: "getdents64", op: OpListdir, fdArg: a0, outBuf: a1},
	34:  {name: "mkdirat", op: OpMkdir, dirfd: a0, path: a1},
	33:  {name: "mknodat", op: OpMknod, dirfd: a0, path: a1},
	35:  {name: "unlinkat", op: OpUnlink, dirfd: a0, path: a1, flags: a2},
	38:  {name: "renameat", op: OpRename, dirfd: a0, path: a1, dirfd2: a2, path2: a3},
	276: {name: "renameat2", op: OpRename, dirfd: a0, path: a1, dirfd2: a2, path2: a3, flags: a4},
	37:  {name: "linkat", op: OpLink, dirfd: a0, path: a1, dirfd2: a2, path2: a3, flags: a4},
	36:  {name: "symlinkat", op: OpSymlink, dirfd: a1, path: a2, rawPath2: a0},
	45:  {name: "truncate", op: OpTruncate, path: a0},
	53:  {name: "fchmodat", op: OpChmod, dirfd: a0, path: a1},
	452: {name: "fchmodat2", op: OpChmod, dirfd: a0, path: a1, flags: a3},
	54:  {name: "fchownat", op: OpChown, dirfd: a0, path: a1, flags: a4},
	88:  {name: "utimensat", op: OpUtime, dirfd: a0, path: a1, flags: a3},
}

// aarch64FdFormFlags: newfstatat and statx, whose AT_EMPTY_PATH form is
// fstat (glibc's fstat on arm64 is newfstatat(fd, "", AT_EMPTY_PATH)).
var aarch64FdFormFlags = map[uint64]int{79: 3, 291: 2}

// aarch64ContextCalls: setuid 146, setgid 144, setreuid 145, setregid 143,
// setresuid 147, setresgid 149, setfsuid 151, setfsgid 152, setgroups 159,
// capset 91, chroot 51, pivot_root 41, unshare 97, setns 268.
var aarch64ContextCalls = map[uint64]bool{
	146: true, 144: true, 145: true, 143: true, 147: true, 149: true, 151: true, 152: true,
	159: true, 91: true, 51: true, 41: true, 97: true, 268: true,
}

// auditArchAarch64 is AUDIT_ARCH_AARCH64 (linux/audit.h): EM_AARCH64 (183),
// 64-bit, little endian.
const auditArchAarch64 = 0xc00000b7

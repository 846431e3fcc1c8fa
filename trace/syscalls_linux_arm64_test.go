package trace

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestAarch64NumbersMatchXSys (arm64 only: run by make test-arm64-unit under
// qemu-user, or natively): the table's written-out numbers are x/sys's
// constants for this architecture.
func TestAarch64NumbersMatchXSys(t *testing.T) {
	want := map[string]uint64{
		"openat": unix.SYS_OPENAT, "openat2": unix.SYS_OPENAT2, "newfstatat": unix.SYS_FSTATAT, "statx": unix.SYS_STATX,
		"faccessat": unix.SYS_FACCESSAT, "faccessat2": unix.SYS_FACCESSAT2, "readlinkat": unix.SYS_READLINKAT,
		"execve": unix.SYS_EXECVE, "execveat": unix.SYS_EXECVEAT, "chdir": unix.SYS_CHDIR, "fchdir": unix.SYS_FCHDIR,
		"getdents64": unix.SYS_GETDENTS64, "mkdirat": unix.SYS_MKDIRAT, "mknodat": unix.SYS_MKNODAT,
		"unlinkat": unix.SYS_UNLINKAT, "renameat": unix.SYS_RENAMEAT, "renameat2": unix.SYS_RENAMEAT2,
		"linkat": unix.SYS_LINKAT, "symlinkat": unix.SYS_SYMLINKAT, "truncate": unix.SYS_TRUNCATE,
		"fchmodat": unix.SYS_FCHMODAT, "fchmodat2": unix.SYS_FCHMODAT2, "fchownat": unix.SYS_FCHOWNAT,
		"utimensat": unix.SYS_UTIMENSAT,
	}
	for nr, spec := range syscallTable {
		if w, ok := want[spec.name]; !ok || w != nr {
			t.Errorf("%s: %d in the table, x/sys says %d", spec.name, nr, w)
		}
	}
	if len(syscallTable) != len(want) {
		t.Errorf("%d calls in the table, want %d", len(syscallTable), len(want))
	}
	for _, nr := range []uint64{unix.SYS_SETUID, unix.SYS_SETGID, unix.SYS_SETREUID, unix.SYS_SETREGID,
		unix.SYS_SETRESUID, unix.SYS_SETRESGID, unix.SYS_SETFSUID, unix.SYS_SETFSGID, unix.SYS_SETGROUPS,
		unix.SYS_CAPSET, unix.SYS_CHROOT, unix.SYS_PIVOT_ROOT, unix.SYS_UNSHARE, unix.SYS_SETNS} {
		if !contextCalls[nr] {
			t.Errorf("context call %d missing", nr)
		}
	}
	if auditArchAarch64 != unix.AUDIT_ARCH_AARCH64 {
		t.Errorf("audit arch %#x, x/sys %#x", auditArchAarch64, unix.AUDIT_ARCH_AARCH64)
	}
}

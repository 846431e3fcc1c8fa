package trace

import (
	"bufio"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
)

// TestDecodeArm64Stops decodes arm64 register sets of real calls. The calls
// are recorded: what Debian 12's arm64 python3 (glibc 2.36) asked the kernel
// while importing numpy and making one call of each path operation, under
// qemu-user (testdata/arm64/python3-numpy.qemu-strace). The register sets
// are derived from those records by the AArch64 syscall ABI (x8 the number,
// as go-seccomp-bpf's aarch64 table gives it; x0-x5 the arguments; x0 the
// result): a native arm64 ptrace stop cannot be made on this x86-64 machine
// (qemu-user does not let a guest trace a guest). The decoder must find the
// call, and its path, second path, directory fd and flags in the registers
// where the kernel put them.
func TestDecodeArm64Stops(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "arm64", "python3-numpy.qemu-strace"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		_, call, _ := strings.Cut(line, " ")
		name, rest, _ := strings.Cut(call, "(")
		argText, resText, _ := strings.Cut(rest, ") = ")
		nr, ok := aarch64Number(name)
		if !ok {
			t.Fatalf("%s: not an aarch64 system call", name)
		}
		// The registers at the seccomp stop: strings get addresses of
		// their own (1<<20 * position), the rest their value.
		var r arm64Regs
		r.X[8] = uint64(nr)
		r.Pc, r.Sp = 0x0000ffff8a2b3c40, 0x0000ffffc0de0000
		var strs, fdcwd []int
		for i, a := range strings.Split(argText, ",") {
			switch {
			case strings.HasPrefix(a, `"`):
				r.X[i] = uint64(i+1) << 20
				strs = append(strs, i)
			case a == "AT_FDCWD":
				r.X[i] = ^uint64(-atFDCWD - 1) // -100 in a register
				fdcwd = append(fdcwd, i)
			default:
				r.X[i] = qemuNumber(a)
			}
		}
		gotNr, args := r.syscall()
		spec, ok := aarch64Syscalls[gotNr]
		if !ok || spec.name != name {
			t.Errorf("%s: x8=%d decodes to %q", line, gotNr, spec.name)
			continue
		}
		n++
		// Where the decoder reads the path and dirfd: the registers that
		// hold the call's strings and AT_FDCWD.
		var wantPath []uint64
		for _, i := range strs {
			wantPath = append(wantPath, args[i])
		}
		var gotPath []uint64
		for _, a := range []argIdx{spec.rawPath2, spec.path, spec.path2} {
			if a != argNone && a.of(args) != 0 {
				gotPath = append(gotPath, a.of(args))
			}
		}
		if spec.fdArg == argNone && len(wantPath) > 0 && !sameSet(gotPath, wantPath) {
			t.Errorf("%s: strings read from %x, the call has them at %x", line, gotPath, wantPath)
		}
		for k, d := range []argIdx{spec.dirfd, spec.dirfd2} {
			if k < len(fdcwd) && (d == argNone || int32(d.of(args)) != atFDCWD) {
				t.Errorf("%s: directory fd %d read from argument %d", line, k+1, d)
			}
		}
		if spec.fdArg != argNone && spec.fdArg.of(args) != qemuNumber(strings.Split(argText, ",")[0]) {
			t.Errorf("%s: fd read from argument %d", line, spec.fdArg)
		}
		if (name == "unlinkat" || name == "newfstatat") && spec.flags == argNone {
			t.Errorf("%s: no flags argument (AT_REMOVEDIR, AT_EMPTY_PATH)", line)
		}
		// The exit stop: x0 holds the result, -errno on failure.
		want := int64(qemuNumber(strings.Fields(resText)[0]))
		if strings.Contains(resText, "errno=") {
			e, _ := strconv.Atoi(strings.Fields(strings.SplitN(resText, "errno=", 2)[1])[0])
			want = -int64(e)
		}
		r.X[0] = uint64(want)
		if r.result() != want {
			t.Errorf("%s: result %d, want %d", line, r.result(), want)
		}
	}
	if n < 10 {
		t.Fatalf("only %d recorded calls decoded", n)
	}
	var r arm64Regs
	r.Pc, r.Sp = 0x1000, 0x2000
	r.setCall(167, 38, 1, 0) // prctl(PR_SET_NO_NEW_PRIVS, 1, 0)
	if nr, args := r.syscall(); nr != 167 || args[0] != 38 || args[1] != 1 || r.pc() != 0x1000 || r.sp() != 0x2000 {
		t.Errorf("setCall: x8=%d x0..x2=%v pc=%#x sp=%#x", nr, args[:3], r.pc(), r.sp())
	}
	if binary.LittleEndian.Uint32(arm64Trap) != 0xd4000001 || binary.LittleEndian.Uint32(arm64Trap[4:]) != 0xd4200000 {
		t.Errorf("arm64Trap %x is not svc #0; brk #0", arm64Trap)
	}
}

// aarch64Number is the number of an aarch64 system call by its name, from
// go-seccomp-bpf, which calls number 79 by the generic table's fstatat where
// the kernel, strace, qemu and this tracer say newfstatat.
func aarch64Number(name string) (int, bool) {
	if name == "newfstatat" {
		name = "fstatat"
	}
	nr, ok := arch.AARCH64.SyscallNames[name]
	return nr, ok
}

func aarch64Name(nr uint64) string {
	if n := arch.AARCH64.SyscallNumbers[int(nr)]; n != "fstatat" {
		return n
	}
	return "newfstatat"
}

// qemuNumber reads a number as qemu -strace prints it (0x.., 0755, -1, 5);
// flag names count as 0.
func qemuNumber(s string) uint64 {
	s = strings.TrimSpace(s)
	if v, err := strconv.ParseInt(s, 0, 64); err == nil {
		return uint64(v)
	}
	if v, err := strconv.ParseUint(s, 0, 64); err == nil {
		return v
	}
	return 0
}

func sameSet(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[uint64]int{}
	for _, x := range a {
		m[x]++
	}
	for _, x := range b {
		if m[x]--; m[x] < 0 {
			return false
		}
	}
	return true
}

// TestAarch64Table: the arm64 table's numbers name the calls the kernel's
// aarch64 table names (go-seccomp-bpf's copy, an independent source), and
// every traced x86_64 call that exists on aarch64 is traced there too, with
// its arguments in the same places.
func TestAarch64Table(t *testing.T) {
	for nr, spec := range aarch64Syscalls {
		if got := aarch64Name(nr); got != spec.name {
			t.Errorf("aarch64 call %d is %q, the table says %q", nr, got, spec.name)
		}
	}
	context := map[string]bool{"setuid": true, "setgid": true, "setreuid": true, "setregid": true, "setresuid": true,
		"setresgid": true, "setfsuid": true, "setfsgid": true, "setgroups": true, "capset": true, "chroot": true,
		"pivot_root": true, "unshare": true, "setns": true}
	for nr := range aarch64ContextCalls {
		if name := arch.AARCH64.SyscallNumbers[int(nr)]; !context[name] {
			t.Errorf("aarch64 context call %d is %q", nr, name)
		}
		delete(context, arch.AARCH64.SyscallNumbers[int(nr)])
	}
	if len(context) > 0 {
		t.Errorf("aarch64 context calls missing: %v", context)
	}
	for nr, arg := range aarch64FdFormFlags {
		if name := arch.AARCH64.SyscallNumbers[int(nr)]; aarch64Syscalls[nr].flags != argIdx(arg+1) {
			t.Errorf("%s: fstat form's flags argument %d, the table's %d", name, arg, aarch64Syscalls[nr].flags)
		}
	}
	if len(syscallTable) == 0 {
		return
	}
	byName := map[string]scSpec{}
	for _, s := range aarch64Syscalls {
		byName[s.name] = s
	}
	for _, s := range syscallTable { // this machine's table
		if _, ok := aarch64Number(s.name); !ok {
			continue // open, stat, ...: x86_64 only
		}
		if got, ok := byName[s.name]; !ok || got != s {
			t.Errorf("%s: traced here as %+v, on aarch64 as %+v", s.name, s, got)
		}
	}
}

// TestFilterX86 is TestFilterArm64 on x86_64's filter.
func TestFilterX86(t *testing.T) {
	if auditArch := nativeFilter.audit; auditArch != auditArchX86_64 {
		t.Skip("the x86_64 table is built on amd64 only")
	}
	testFilterVM(t, &nativeFilter, auditArchX86_64, map[string]uint32{
		"openat": seccompRetTrace, "open": seccompRetTrace, "execve": seccompRetTrace, "setuid": seccompRetTrace,
		"read": seccompRetAllow, "mmap": seccompRetAllow, "getcwd": seccompRetAllow,
	}, arch.X86_64)
}

// TestFilterArm64: the arm64 filter, run in x/net/bpf's VM on the
// seccomp_data the kernel would give it: traced calls stop in the tracer,
// the fstat form of newfstatat runs, other calls run, and so do arm32 calls
// of a compat process (as i386 ones on x86_64: the program go-seccomp-bpf
// assembles for the policy allows other architectures' calls).
func TestFilterArm64(t *testing.T) {
	testFilterVM(t, &filterArch{audit: auditArchAarch64, syscalls: aarch64Syscalls,
		fdForm: aarch64FdFormFlags, context: aarch64ContextCalls}, auditArchAarch64, map[string]uint32{
		"openat": seccompRetTrace, "execve": seccompRetTrace, "setuid": seccompRetTrace,
		"read": seccompRetAllow, "mmap": seccompRetAllow, "getcwd": seccompRetAllow,
	}, arch.AARCH64)
}

func testFilterVM(t *testing.T, a *filterArch, audit uint32, want map[string]uint32, info *arch.Info) {
	prog, err := a.program()
	if err != nil {
		t.Fatal(err)
	}
	var insts []bpf.Instruction
	for _, f := range prog {
		insts = append(insts, bpf.RawInstruction{Op: f.Code, Jt: f.Jt, Jf: f.Jf, K: f.K}.Disassemble())
	}
	vm, err := bpf.NewVM(insts)
	if err != nil {
		t.Fatal(err)
	}
	run := func(nr int, audit uint32, args ...uint64) uint32 {
		data := make([]byte, 64) // struct seccomp_data: nr, arch, ip, args[6]
		binary.LittleEndian.PutUint32(data, uint32(nr))
		binary.LittleEndian.PutUint32(data[4:], audit)
		for i, v := range args {
			binary.LittleEndian.PutUint64(data[16+8*i:], v)
		}
		// x/net/bpf's VM loads big endian; the kernel's seccomp_data is
		// native (little) endian: swap each 32-bit word.
		for i := 0; i < len(data); i += 4 {
			binary.BigEndian.PutUint32(data[i:], binary.LittleEndian.Uint32(data[i:]))
		}
		v, err := vm.Run(data)
		if err != nil {
			t.Fatal(err)
		}
		return uint32(v)
	}
	for name, w := range want {
		if got := run(info.SyscallNames[name], audit); got != w {
			t.Errorf("%s: %#x, want %#x", name, got, w)
		}
	}
	fstatat, _ := aarch64Number("newfstatat")
	if info != arch.AARCH64 {
		fstatat = info.SyscallNames["newfstatat"]
	}
	if got := run(fstatat, audit, 3, 0, 0, atEmptyPath); got != seccompRetAllow {
		t.Errorf("newfstatat(fd, \"\", AT_EMPTY_PATH): %#x, want allow", got)
	}
	if got := run(fstatat, audit, ^uint64(-atFDCWD-1), 0x1000, 0, 0); got != seccompRetTrace {
		t.Errorf("newfstatat(AT_FDCWD, path): %#x, want trace", got)
	}
	if got := run(info.SyscallNames["openat"], 0x40000028); got != seccompRetAllow { // AUDIT_ARCH_ARM
		t.Errorf("a call of another architecture: %#x, want allow", got)
	}
}

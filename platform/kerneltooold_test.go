package platform

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestKernelTooOldRefused: an image whose glibc needs a newer kernel than
// this node runs is refused before the app starts. The image is built on
// Debian 11 (glibc 2.31) seen through an overlay whose libc.so.6 has its
// ABI note (.note.ABI-tag, the minimum kernel ld.so and dlbundle read)
// edited to Linux 99.0.0 after the trace, so that the chroot itself is
// untouched; on this node (glibc 2.36) exec and env exit 1 with one line
// naming both kernels and the ways out; with --fallback exec runs the
// command natively and env prints no variable.
func TestKernelTooOldRefused(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("the chroots are prepared for an x86-64 host")
	}
	if os.Getuid() != 0 {
		t.Skip("needs root (chroot, overlay mount); make test runs as root")
	}
	lower := filepath.Join(chrootRoot(), "bullseye-amd64")
	if _, err := os.Stat(filepath.Join(lower, "usr/bin/python3")); err != nil {
		t.Skipf("chroot bullseye-amd64 absent (%v): `make deps` prepares it", err)
	}
	merged := overlayOf(t, lower)
	build := newChroot(t, chrootSpec{"bullseye-amd64", "amd64", "", "/lib64/ld-linux-x86-64.so.2"}, merged)
	build.must(t, build.work+"/dlbundle-amd64", "trace", "-q", "-o", build.work+"/ls.trace", "--", "/bin/ls", "--version")

	libc, err := filepath.EvalSymlinks(filepath.Join(merged, "lib/x86_64-linux-gnu/libc.so.6"))
	if err != nil || !strings.HasPrefix(libc, merged+"/") {
		t.Fatalf("libc.so.6 in the overlay: %q %v", libc, err)
	}
	setMinKernel(t, libc, 99)

	build.must(t, build.work+"/dlbundle-amd64", "build", "-o", build.work+"/ls.dlimg", build.work+"/ls.trace")
	img := filepath.Join(build.host, "ls.dlimg")
	cli := dlbundleFor(t, "amd64")
	var uts unix.Utsname
	unix.Uname(&uts)
	release := unix.ByteSliceToString(uts.Release[:])
	native, err := exec.Command("/bin/ls", "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	stage := filepath.Join(t.TempDir(), "stage")
	run := func(args ...string) (string, string, int) {
		t.Helper()
		verb := "exec"
		if len(args) > 0 && args[0] == "env" {
			verb, args = "env", args[1:]
		}
		argv := append(append([]string{verb, "--stage-dir", stage}, args...), img)
		if verb == "exec" {
			argv = append(argv, "--", "/bin/ls", "--version")
		}
		cmd := exec.Command(cli, argv...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/", "LANG=C.UTF-8"}
		var o, e strings.Builder
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return o.String(), e.String(), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return o.String(), e.String(), 0
	}
	out, errOut, code := run()
	if code != 1 || out != "" {
		t.Fatalf("exec of an image whose glibc needs Linux 99 on %s: exit %d, stdout %q (want 1, nothing run)\n%s", release, code, out, errOut)
	}
	line := strings.TrimRight(errOut, "\n")
	t.Logf("the refusal: %s", line)
	for _, w := range []string{"glibc 2.31 needs Linux 99.0.0 or later", "this node runs " + release, "--fallback"} {
		if !strings.Contains(line, w) {
			t.Errorf("the refusal does not say %q:\n%s", w, errOut)
		}
	}
	if strings.Contains(line, "\n") || ldsoNoise.MatchString(line) {
		t.Errorf("the refusal is not the stager's one line:\n%s", errOut)
	}
	out, errOut, code = run("env")
	if code != 1 || out != "" || strings.Contains(strings.TrimRight(errOut, "\n"), "\n") || !strings.Contains(errOut, "needs Linux 99.0.0 or later") {
		t.Errorf("env: exit %d, stdout %q (want 1, no variable, one line), stderr:\n%s", code, out, errOut)
	}
	out, errOut, code = run("env", "--fallback")
	if code != 0 || strings.Contains(out, "LD_") || !strings.Contains(errOut, "warning") {
		t.Errorf("env --fallback: exit %d, stdout %q (want no variable, a warning), stderr:\n%s", code, out, errOut)
	}
	out, errOut, code = run("--fallback")
	if code != 0 || out != string(native) || !strings.Contains(errOut, "warning") || !strings.Contains(errOut, "natively") {
		t.Errorf("exec --fallback: exit %d, stdout %q (want the node's own %q), stderr:\n%s", code, out, native, errOut)
	}
}

// setMinKernel rewrites the minimum kernel (to major.0.0) in the ELF
// file's NT_GNU_ABI_TAG note, keeping its size and mtime (the build takes a
// file changed since the trace for one the pilot did not use).
func setMinKernel(t *testing.T, p string, major uint32) {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	at := -1
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_NOTE {
			continue
		}
		for off := int(prog.Off); off+12 <= int(prog.Off+prog.Filesz); {
			namesz := int(binary.LittleEndian.Uint32(data[off:]))
			descsz := int(binary.LittleEndian.Uint32(data[off+4:]))
			typ := binary.LittleEndian.Uint32(data[off+8:])
			name := off + 12
			desc := name + (namesz+3)&^3
			if typ == 1 && namesz == 4 && string(data[name:name+4]) == "GNU\x00" && descsz >= 16 {
				at = desc + 4
			}
			off = desc + (descsz+3)&^3
		}
	}
	if at < 0 {
		t.Fatalf("%s has no ABI note", p)
	}
	binary.LittleEndian.PutUint32(data[at:], major)
	binary.LittleEndian.PutUint32(data[at+4:], 0)
	binary.LittleEndian.PutUint32(data[at+8:], 0)
	if err := os.WriteFile(p, data, st.Mode()); err != nil {
		t.Fatal(err)
	}
	mt := st.ModTime()
	if err := os.Chtimes(p, time.Now(), mt); err != nil {
		t.Fatal(err)
	}
}

// overlayOf mounts an overlay of the directory lower with a private upper
// layer (removed with the test) and returns where: a copy of a chroot the
// test may change without touching it. Skips the test where overlayfs is
// missing.
func overlayOf(t *testing.T, lower string) string {
	ov := t.TempDir()
	for _, d := range []string{"upper", "work", "merged"} {
		if err := os.Mkdir(filepath.Join(ov, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	merged := filepath.Join(ov, "merged")
	if err := unix.Mount("overlay", merged, "overlay", 0,
		"lowerdir="+lower+",upperdir="+filepath.Join(ov, "upper")+",workdir="+filepath.Join(ov, "work")); err != nil {
		t.Skipf("no overlay file system here (%v)", err)
	}
	t.Cleanup(func() { unix.Unmount(merged, unix.MNT_DETACH) })
	return merged
}

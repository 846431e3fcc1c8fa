package flux

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/clitest"
)

// crossScript prints the glibc the process runs with beside what numpy and
// Python say: the build node's line only under the image's ld.so and libc.
const crossScript = `import os, sys, numpy; print(os.confstr("CS_GNU_LIBC_VERSION"), numpy.arange(10).sum(), numpy.__version__, sys.version_info[:2], sys.executable)`

// inChroot runs argv in root with /proc mounted in a mount namespace of its
// own (nothing is mounted on the shared chroot).
func inChroot(t *testing.T, root, home string, argv ...string) string {
	t.Helper()
	cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "--", "/bin/sh", "-c",
		`/usr/bin/mount -t proc proc "$0/proc" && cd "$0" && exec /usr/sbin/chroot "$0" "$@"`, root}, argv...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home, "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1"}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("in %s: %s: %v\n%s%s", root, strings.Join(argv, " "), err, o.String(), e.String())
	}
	return o.String()
}

// TestFluxCrossGlibc: python3 with numpy traced and built on Debian 11
// (glibc 2.31, the chroot make deps prepares), run with flux run -o
// dlbundle= on the 3 brokers of flux start --test-size=3 on this machine
// (another glibc): each task prints the build node's native line, glibc
// 2.31 included, because dlbundle_ldso.so, loaded by dlbundle.lua from
// beside it, starts the task under the image's ld.so. Without that plugin
// the task prints this machine's glibc or dies (the check can fail). An
// image of aarch64 programs fails the job with dlbundle's one line, and
// -o dlbundle-fallback runs it natively.
func TestFluxCrossGlibc(t *testing.T) {
	flux := fluxBin(t)
	if os.Getuid() != 0 {
		t.Skip("needs root (chroot, mount namespaces); make test runs as root")
	}
	chroots := os.Getenv("DLBUNDLE_CHROOTS")
	if chroots == "" {
		chroots = "/var/cache/dlbundle/chroots"
	}
	root := filepath.Join(chroots, "bullseye-amd64")
	if _, err := os.Stat(filepath.Join(root, "usr/bin/python3")); err != nil {
		t.Skipf("chroot bullseye-amd64 absent (%v): `make deps` prepares it", err)
	}
	inc := filepath.Join(filepath.Dir(filepath.Dir(flux)), "include")
	if _, err := os.Stat(filepath.Join(inc, "flux/shell.h")); err != nil {
		t.Fatalf("flux's shell.h is needed to build dlbundle_ldso.so: %v", err)
	}
	bin := clitest.CLI(t)
	var b [6]byte
	rand.Read(b[:])
	work := "/tmp/dlbundle-flux-" + hex.EncodeToString(b[:])
	if err := os.MkdirAll(filepath.Join(root, work), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Join(root, work)) })
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, work, "dlbundle"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	argv := []string{"/usr/bin/python3", "-c", crossScript}
	native := strings.TrimSpace(inChroot(t, root, work, argv...))
	if !strings.HasPrefix(native, "glibc 2.31 ") {
		t.Fatalf("natively on Debian 11: %q; want glibc 2.31", native)
	}
	inChroot(t, root, work, append([]string{work + "/dlbundle", "trace", "-q", "-o", work + "/app.trace", "--"}, argv...)...)
	inChroot(t, root, work, work+"/dlbundle", "build", "-o", work+"/app.dlimg", work+"/app.trace")
	dir := t.TempDir()
	img := filepath.Join(dir, "app.dlimg")
	if data, err = os.ReadFile(filepath.Join(root, work, "app.dlimg")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img, data, 0o644); err != nil {
		t.Fatal(err)
	}
	// The plugin as installed: dlbundle.lua with dlbundle_ldso.so beside it.
	luad := filepath.Join(dir, "lua.d")
	os.Mkdir(luad, 0o755)
	lua, _ := os.ReadFile("dlbundle.lua")
	if err := os.WriteFile(filepath.Join(luad, "dlbundle.lua"), lua, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared", "-I", inc,
		"-o", filepath.Join(luad, "dlbundle_ldso.so"), "ldso/dlbundle_ldso.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc dlbundle_ldso.c: %v\n%s", err, out)
	}
	os.Mkdir(filepath.Join(dir, "bin"), 0o755)
	os.Symlink(bin, filepath.Join(dir, "bin", "dlbundle"))
	env := append(clitest.CleanEnv(dir), "PATH="+filepath.Join(dir, "bin")+":"+filepath.Dir(flux)+":/usr/bin:/bin",
		"DLBUNDLE_STAGE_DIR="+filepath.Join(dir, "stage"))
	job := "flux run -o userrc=" + filepath.Join(luad, "dlbundle.lua") + " -o dlbundle=" + img + " -N3 -n3 " + argv[0] + " -c '" + crossScript + "'"
	// Without the C half (only the Lua file), for the contrast.
	plain := filepath.Join(dir, "plain.lua")
	os.WriteFile(plain, lua, 0o644)
	jobPlain := "flux run -o userrc=" + plain + " -o dlbundle=" + img + " -N3 -n3 " + argv[0] + " -c '" + crossScript + "'"
	// An image of another architecture (Debian's arm64 true, when the
	// chroot is there): the job fails with dlbundle's line naming both;
	// -o dlbundle-fallback runs it natively.
	armImg := ""
	if src := filepath.Join(chroots, "bookworm-arm64", "usr/bin/true"); fileExists(src) {
		armImg = filepath.Join(dir, "arm64.dlimg")
		st, _ := os.Stat(src)
		f, err := os.Create(armImg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = image.Write(f, []image.Entry{{Path: "/opt/dlbundle-flux-arm64/bin/true", Type: image.TypeRegular, Mode: 0o100755,
			Size: st.Size(), MtimeNS: st.ModTime().UnixNano(), Kind: image.KindELFExec, SourcePath: src}}, image.WriteOptions{})
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	script := job + " > served.out 2>&1; " + jobPlain + " > plain.out 2>&1; "
	if armImg != "" {
		arm := "flux run -o userrc=" + filepath.Join(luad, "dlbundle.lua") + " -o dlbundle=" + armImg + " -N3 -n3 "
		script += arm + "/bin/echo ran-natively > arch.out 2>&1; echo $? > arch.rc; " +
			arm + "-o dlbundle-fallback /bin/echo ran-natively > archfb.out 2>&1; echo $? > archfb.rc; "
	}
	script += "true"
	if out, code := run(t, dir, env, flux, "start", "--test-size=3", "sh", "-c", script); code != 0 {
		t.Fatalf("flux start --test-size=3: exit %d\n%s", code, out)
	}
	served, _ := os.ReadFile(filepath.Join(dir, "served.out"))
	if strings.Count(string(served), native+"\n") != 3 {
		t.Errorf("flux run -o dlbundle= of Debian 11's image on 3 brokers of this machine's glibc: want 3 lines %q:\n%s", native, served)
	}
	without, _ := os.ReadFile(filepath.Join(dir, "plain.out"))
	if strings.Contains(string(without), native+"\n") {
		t.Errorf("without dlbundle_ldso.so the tasks printed the build node's line too: the test cannot tell\n%s", without)
	}
	t.Logf("without dlbundle_ldso.so:\n%s", without)
	if armImg == "" {
		t.Logf("chroot bookworm-arm64 absent: the other architecture's refusal not checked (make deps prepares it)")
		return
	}
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return string(b)
	}
	if out := read("arch.out"); strings.TrimSpace(read("arch.rc")) == "0" || strings.Contains(out, "ran-natively") ||
		!strings.Contains(out, "image is for aarch64, this node is x86_64") {
		t.Errorf("aarch64 image under flux run: exit %s; want a failed job with dlbundle's line and no task run:\n%s", read("arch.rc"), out)
	}
	if out := read("archfb.out"); strings.TrimSpace(read("archfb.rc")) != "0" || strings.Count(out, "ran-natively\n") != 3 ||
		!strings.Contains(out, "dlbundle: warning:") {
		t.Errorf("aarch64 image with -o dlbundle-fallback: exit %s; want 3 native tasks and a warning:\n%s", read("archfb.rc"), out)
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

package loader

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/loader/stagefmt"
)

// shimSources are hashed into shim/sources.sha256 by shim/build.sh, in this order.
var shimSources = []string{"build.sh", "audit.c", "lookup.c", "statopen.c", "realpath.c", "listings.c", "exec.c", "writes.c", "gettext.c", "report.c",
	"shim_state.h", "intercept.h", "report.h", "reportfmt.h", "table.h", "ldcache.h", "rawsys.h"}

// TestShimObjectsUpToDate fails when the C sources changed but the committed
// objects were not regenerated (`go generate ./loader/`), as with bpf2go.
func TestShimObjectsUpToDate(t *testing.T) {
	h := sha256.New()
	for _, name := range shimSources {
		b, err := os.ReadFile(filepath.Join("shim", name))
		if err != nil {
			t.Fatal(err)
		}
		h.Write(b)
	}
	want, err := os.ReadFile("shim/sources.sha256")
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != strings.TrimSpace(string(want)) {
		t.Fatalf("loader/shim sources changed since the objects were built (sha256 %s, objects built from %s); run `go generate ./loader/` and commit the objects",
			got, strings.TrimSpace(string(want)))
	}
	for obj, want := range stagefmt.ShimObjects {
		b, err := os.ReadFile(filepath.Join("shim", runtime.GOARCH, obj))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, want) {
			t.Fatalf("embedded %s differs from shim/%s/%s; rebuild", obj, runtime.GOARCH, obj)
		}
	}
	// Both architectures' objects are committed, each of its machine.
	for arch, machine := range shimMachines {
		for obj := range stagefmt.ShimObjects {
			f, err := elf.Open(filepath.Join("shim", arch, obj))
			if err != nil {
				t.Fatal(err)
			}
			if f.Class != elf.ELFCLASS64 || f.Machine != machine {
				t.Errorf("shim/%s/%s is %v %v, want ELFCLASS64 %v", arch, obj, f.Class, f.Machine, machine)
			}
			f.Close()
		}
	}
}

// shimMachines are the architectures shim/build.sh builds for.
var shimMachines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// shimObject reads the committed object name of arch.
func shimObject(t *testing.T, arch, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("shim", arch, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestAuditObjectIsFreestanding: an LD_AUDIT object with DT_NEEDED entries
// makes ld.so load (and search for) a second libc in every process.
func TestAuditObjectIsFreestanding(t *testing.T) {
	for arch := range shimMachines {
		t.Run(arch, func(t *testing.T) { testAuditObjectIsFreestanding(t, shimObject(t, arch, stagefmt.AuditObject)) })
	}
}

func testAuditObjectIsFreestanding(t *testing.T, obj []byte) {
	f, err := elf.NewFile(bytes.NewReader(obj))
	if err != nil {
		t.Fatal(err)
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) != 0 {
		t.Fatalf("audit.so needs %v; it must have no DT_NEEDED entries", libs)
	}
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	for _, s := range syms {
		if s.Section == elf.SHN_UNDEF && s.Name != "" {
			t.Errorf("audit.so has an undefined symbol %s", s.Name)
		}
		defined[s.Name] = true
	}
	for _, want := range []string{"la_version", "la_objsearch", "la_objopen"} {
		if !defined[want] {
			t.Errorf("audit.so does not export %s", want)
		}
	}
}

// TestPreloadNeedsOnlyOldGlibc: the preload object must load on every glibc
// from 2.17 on (RHEL 7), so no symbol it imports may need a newer version
// (linked naively on a new host, dlsym would need GLIBC_2.34).
func TestPreloadNeedsOnlyOldGlibc(t *testing.T) {
	for arch := range shimMachines {
		t.Run(arch, func(t *testing.T) { testPreloadNeedsOnlyOldGlibc(t, shimObject(t, arch, stagefmt.PreloadObject)) })
	}
}

func testPreloadNeedsOnlyOldGlibc(t *testing.T, obj []byte) {
	f, err := elf.NewFile(bytes.NewReader(obj))
	if err != nil {
		t.Fatal(err)
	}
	syms, err := f.ImportedSymbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		v, ok := strings.CutPrefix(s.Version, "GLIBC_")
		if !ok {
			continue
		}
		var major, minor int
		fmt.Sscanf(v, "%d.%d", &major, &minor)
		if major > 2 || (major == 2 && minor > 17) {
			t.Errorf("preload.so imports %s@%s from %s: it would not load on glibc < %s", s.Name, s.Version, s.Library, v)
		}
	}
	if len(syms) == 0 {
		t.Fatal("preload.so imports no symbols: not the object we built")
	}
}

// TestPreload234NeedsNoLibdl: the build for glibc >= 2.34 needs libc.so.6
// (and ld.so, already loaded: TLS), never libdl.so.2, and no symbol newer
// than 2.34.
func TestPreload234NeedsNoLibdl(t *testing.T) {
	for arch := range shimMachines {
		t.Run(arch, func(t *testing.T) { testPreload234NeedsNoLibdl(t, shimObject(t, arch, stagefmt.Preload234Object)) })
	}
}

func testPreload234NeedsNoLibdl(t *testing.T, obj []byte) {
	f, err := elf.NewFile(bytes.NewReader(obj))
	if err != nil {
		t.Fatal(err)
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range libs {
		if l != "libc.so.6" && !strings.HasPrefix(l, "ld-linux") {
			t.Errorf("preload-2.34.so needs %s; it must need only libc.so.6", l)
		}
	}
	syms, err := f.ImportedSymbols()
	if err != nil {
		t.Fatal(err)
	}
	dlsym := false
	for _, s := range syms {
		v, ok := strings.CutPrefix(s.Version, "GLIBC_")
		if !ok {
			continue
		}
		var major, minor int
		fmt.Sscanf(v, "%d.%d", &major, &minor)
		if major > 2 || (major == 2 && minor > 34) {
			t.Errorf("preload-2.34.so imports %s@%s: it would not load on glibc 2.34", s.Name, s.Version)
		}
		dlsym = dlsym || s.Name == "dlsym" && s.Library == "libc.so.6"
	}
	if !dlsym {
		t.Errorf("preload-2.34.so does not take dlsym from libc.so.6: %v", syms)
	}
}

// TestShimWithoutStage: a child that kept LD_PRELOAD/LD_AUDIT but lost
// DLBUNDLE_STAGE (or whose stage is gone) runs natively, without a word.
func TestShimWithoutStage(t *testing.T) {
	dir := t.TempDir()
	if err := stagefmt.WriteShim(filepath.Join(dir, "shim")); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "f")
	if err := os.WriteFile(f, []byte("native\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, stage := range []string{"", filepath.Join(dir, "gone")} {
		env := []string{"PATH=/usr/bin:/bin", "LD_AUDIT=" + filepath.Join(dir, "shim", stagefmt.AuditObject),
			"LD_PRELOAD=" + filepath.Join(dir, "shim", stagefmt.PreloadObject)}
		if stage != "" {
			env = append(env, EnvStage+"="+stage)
		}
		cmd := exec.Command("/bin/sh", "-c", "cat "+f+"; ls "+dir+" >/dev/null; test -e "+f+"/x || echo ok")
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil || string(out) != "native\nok\n" {
			t.Errorf("stage %q: %v, output %q; want the native output and nothing else", stage, err, out)
		}
	}
}

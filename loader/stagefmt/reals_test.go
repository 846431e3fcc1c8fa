package stagefmt

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// What FormatReals records for this machine's libc is what dlsym returns:
// a C program looks every name up (dlsym(RTLD_DEFAULT): its own scope is
// itself, then libc, as the preload's RTLD_NEXT is when nothing lies
// between) and prints the offset from libc's base. A name it writes "-"
// for is left to dlsym; at least the plain file functions (open, stat...)
// must have an offset, or the preload gains nothing.
func TestFormatRealsIsWhatDlsymReturns(t *testing.T) {
	libc := NodeLibc()
	if libc == "" {
		t.Skip("no libc known for this architecture")
	}
	names := strings.Fields(shimRealNames)
	if len(names) < 80 {
		t.Fatalf("%d names from loader/shim/*/realnames; want the table's ~90", len(names))
	}
	f, err := os.Open(libc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	block := formatReals(f, names)
	if block == nil {
		t.Fatalf("no block for %s", libc)
	}
	lines := strings.Split(strings.TrimSuffix(string(block), "\n"), "\n")
	if !strings.HasPrefix(lines[0], "libc ") || len(lines) != len(names)+1 {
		t.Fatalf("block:\n%s", block)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "look.c")
	prog := `#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
static uintptr_t base;
static int find(struct dl_phdr_info *i, size_t n, void *d) { (void)n; (void)d; if (strstr(i->dlpi_name, "/libc.so.6")) base = i->dlpi_addr; return 0; }
int main(int argc, char **argv) {
	dl_iterate_phdr(find, 0);
	for (int i = 1; i < argc; i++) { void *p = dlsym(RTLD_DEFAULT, argv[i]); printf("%s %lx\n", argv[i], p ? (unsigned long)((uintptr_t)p - base) : 0UL); }
	return base ? 0 : 1;
}
`
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "look")
	if out, err := exec.Command("gcc", "-O1", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, names...).Output()
	if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		n, off, _ := strings.Cut(l, " ")
		got[n] = off
	}
	offsets := 0
	for i, n := range names {
		w := strings.Fields(lines[i+1])
		if len(w) != 3 || w[0] != "real" || w[1] != n {
			t.Fatalf("line %d %q; want real %s OFFSET (the table's order)", i+2, lines[i+1], n)
		}
		if w[2] == "-" {
			continue
		}
		offsets++
		if w[2] != got[n] {
			t.Errorf("%s: recorded %s, dlsym gives %s", n, w[2], got[n])
		}
	}
	for _, n := range []string{"open", "openat", "stat", "lstat", "readlink", "opendir", "readdir64", "execve", "access"} {
		if !strings.Contains(string(block), "real "+n+" ") || strings.Contains(string(block), "real "+n+" -\n") {
			t.Errorf("no offset for %s", n)
		}
	}
	t.Logf("%d of %d names with an offset", offsets, len(names))
}

func FuzzFormatReals(f *testing.F) {
	if b, err := os.ReadFile("/bin/true"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("\x7fELF"))
	names := strings.Fields(shimRealNames)
	f.Fuzz(func(t *testing.T, b []byte) {
		formatReals(strings.NewReader(string(b)), names)
	})
}

package squash

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/dlbundle/dlbundle/image"
)

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestClassifyRealFiles(t *testing.T) {
	dir := t.TempDir()
	tree(t, dir, map[string]string{
		"m.py":                          "import os\n",
		"run.sh":                        "#!/bin/sh\necho hi\n",
		"data.json":                     "{}",
		"short":                         "#",
		"__pycache__/m.cpython-311.pyc": "\xa7\x0d\r\n....",
	})
	// An extension module outside any Python directory, renamed: found by its PyInit_<name> export.
	copyFile(t, "/usr/lib/python3.11/lib-dynload/_json.cpython-311-x86_64-linux-gnu.so", dir+"/_json.so")
	copyFile(t, "/usr/lib/x86_64-linux-gnu/libz.so.1.2.13", dir+"/libz.so")
	gcc(t, "-no-pie", "-o", dir+"/static-exe", writeC(t, dir, "int main(void){return 0;}"))
	for p, want := range map[string]image.Kind{
		"/usr/bin/python3.11":                 image.KindELFExec,   // PIE: ET_DYN with an interpreter
		dir + "/static-exe":                   image.KindELFExec,   // ET_EXEC
		"/usr/lib/x86_64-linux-gnu/libc.so.6": image.KindELFShared, // has an interpreter, but a SONAME too
		"/lib64/ld-linux-x86-64.so.2":         image.KindELFShared,
		dir + "/libz.so":                      image.KindELFShared,
		dir + "/_json.so":                     image.KindPyExtension,
		"/usr/lib/python3.11/lib-dynload/_json.cpython-311-x86_64-linux-gnu.so": image.KindPyExtension,
		dir + "/m.py":                          image.KindPySource,
		dir + "/__pycache__/m.cpython-311.pyc": image.KindPyBytecode,
		dir + "/run.sh":                        image.KindScript,
		dir + "/data.json":                     image.KindData,
		dir + "/short":                         image.KindData,
	} {
		if got := classify(p); got != want {
			t.Errorf("%s: %s, want %s", p, got, want)
		}
	}
}

func writeC(t *testing.T, dir, src string) string {
	p := filepath.Join(dir, "prog.c")
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckPyc(t *testing.T) {
	dir := t.TempDir()
	tree(t, dir, map[string]string{"m.py": "x = 1\n"})
	pyc := dir + "/__pycache__/m.cpython-311.opt-1.pyc"
	writePyc(t, pyc, dir+"/m.py")
	if err := checkPyc(pyc); err != nil {
		t.Fatalf("valid pyc rejected: %v", err)
	}
	if src, _ := pycSource(pyc); src != dir+"/m.py" {
		t.Errorf("source of %s: %s", pyc, src)
	}
	bad := map[string][]byte{
		"short":      []byte("\xa7\x0d\r\n"),
		"magic":      append([]byte("\xa7\x0d\n\r"), make([]byte, 12)...),
		"hash-based": append([]byte("\xa7\x0d\r\n\x01\x00\x00\x00"), make([]byte, 8)...),
	}
	for name, b := range bad {
		if err := os.WriteFile(pyc, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := checkPyc(pyc); err == nil {
			t.Errorf("%s pyc accepted", name)
		}
	}
	writePyc(t, pyc, dir+"/m.py")
	if err := os.WriteFile(dir+"/m.py", []byte("x = 12\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkPyc(pyc); err == nil {
		t.Errorf("pyc accepted after its source changed size")
	}
	if err := checkPyc(dir + "/m.pyc"); err == nil {
		t.Errorf("a .pyc outside __pycache__ accepted")
	}
}

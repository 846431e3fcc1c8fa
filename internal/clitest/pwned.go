package clitest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/dlbundle/dlbundle/image"
)

// PwnedImage writes the image an attacker plants (issue 18) to img: it
// bundles, at original, a program that prints "PWNED" and the uid it ran as.
// The program is compiled in work.
func PwnedImage(t *testing.T, work, img, original string) {
	t.Helper()
	src := filepath.Join(work, "pwned.c")
	bin := filepath.Join(work, "pwned")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, []byte("#include <stdio.h>\n#include <unistd.h>\nint main(void) { printf(\"PWNED: attacker's program ran as uid %d\\n\", (int)getuid()); return 0; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-O1", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	st, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := image.Write(f, []image.Entry{{Path: original, Type: image.TypeRegular, Mode: 0o100755, Size: st.Size(),
		MtimeNS: st.ModTime().UnixNano(), Kind: image.KindELFExec, SourcePath: bin}}, image.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
}

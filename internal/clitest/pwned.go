package clitest

import (
	"os"
	"path/filepath"
	"testing"
)

// pwnedSource is the attacker's program: it says that it ran, and as whom.
const pwnedSource = "#include <stdio.h>\n#include <unistd.h>\nint main(void) { printf(\"PWNED: attacker's program ran as uid %d\\n\", (int)getuid()); return 0; }\n"

// PwnedImage writes the image an attacker plants to img: it
// bundles, at original, a program that prints "PWNED" and the uid it ran as.
// The program is compiled in work.
func PwnedImage(t *testing.T, work, img, original string) {
	t.Helper()
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	bundleProgram(t, pwnedSource, filepath.Join(work, "pwned"), img, original)
}

package loader

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/dlbundle/dlbundle/internal/abspath"
	"github.com/dlbundle/dlbundle/loader/stagefmt"
)

// StagedPath tells whether the command path original (absolute, or relative
// to the cwd) is a bundled ELF executable of the stage at stageDir, and
// returns its staged copy (stage root + the path as given: symlinks inside
// the stage resolve as the originals do). Scripts: see StagedScript.
func StagedPath(stageDir, original string) (string, bool) {
	abs, err := abspath.Abs(original)
	if err != nil {
		return "", false
	}
	tab, release, err := stagefmt.MapTable(stageDir)
	if err != nil {
		return "", false
	}
	defer release()
	final, ok := stagefmt.ResolveFile(tab, abs)
	if !ok || !isELF(filepath.Join(stageDir, stagefmt.RootDir, final)) {
		return "", false
	}
	return filepath.Join(stageDir, stagefmt.RootDir, abs), true
}

// StagedScript tells whether the command path original (absolute) is a
// bundled executable "#!" script of the stage at stageDir, and returns its
// interpreter and optional argument as the kernel parses the line (first
// 256 bytes; the rest of the line after the interpreter, blanks trimmed, is
// one argument). exec then starts the interpreter itself, with the script's
// original path in argv as the kernel would, so that a bundled interpreter
// runs from the stage and nothing is looked up on the original tree.
func StagedScript(stageDir, original string) (interp, arg string, ok bool) {
	tab, release, err := stagefmt.MapTable(stageDir)
	if err != nil {
		return "", "", false
	}
	defer release()
	final, ok := stagefmt.ResolveFile(tab, original)
	if !ok {
		return "", "", false
	}
	if ent, found := stagefmt.Find(tab, final); !found || ent.Mode&0o111 == 0 {
		return "", "", false
	}
	f, err := os.Open(filepath.Join(stageDir, stagefmt.RootDir, final))
	if err != nil {
		return "", "", false
	}
	defer f.Close()
	buf := make([]byte, 256)
	n, _ := io.ReadFull(f, buf)
	return parseShebang(buf[:n])
}

// parseShebang parses a "#!" line as Linux's binfmt_script does; ok is false
// when there is none or the kernel would have to decide (no newline within
// its 256-byte buffer).
func parseShebang(b []byte) (interp, arg string, ok bool) {
	line, _, found := bytes.Cut(b, []byte("\n"))
	if !found || !bytes.HasPrefix(line, []byte("#!")) {
		return "", "", false
	}
	rest := strings.TrimLeft(string(line[2:]), " \t")
	interp = rest
	if i := strings.IndexAny(rest, " \t"); i >= 0 {
		interp, arg = rest[:i], strings.Trim(rest[i:], " \t")
	}
	if interp == "" || strings.ContainsRune(interp, 0) {
		return "", "", false
	}
	return interp, arg, true
}

func isELF(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	var m [4]byte
	_, err = f.ReadAt(m[:], 0)
	return err == nil && string(m[:]) == "\x7fELF"
}

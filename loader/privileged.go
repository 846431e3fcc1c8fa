package loader

import (
	"path/filepath"
	"strings"

	"github.com/dlbundle/dlbundle/loader/stagefmt"
)

// privilegedMode tells whether a file of mode m gains privileges when
// executed: setuid, or setgid with group execute (setgid without it means
// mandatory locking, not privilege). The shim's privileged_mode is the same
// rule.
func privilegedMode(m uint32) bool {
	const setuid, setgid = 0o4000, 0o2000
	return m&setuid != 0 && m&0o111 != 0 || m&setgid != 0 && m&0o010 != 0
}

// privilegedOriginal tells whether file, a path StagedPath returned, is the
// staged copy of a setuid or setgid original, from the mode the image
// recorded (the table's: no operation on the original). Extraction drops
// those bits (an image must not create privileged files), so such a
// program must run from its original, natively; it returns that original.
// An image that lies about the bits only makes the program run as without
// dlbundle, or without its privilege, never with more.
func privilegedOriginal(stageDir, file string) (string, bool) {
	orig, ok := strings.CutPrefix(file, filepath.Join(stageDir, stagefmt.RootDir))
	if !ok || !strings.HasPrefix(orig, "/") {
		return "", false
	}
	tab, release, err := stagefmt.MapTable(stageDir)
	if err != nil {
		return "", false
	}
	defer release()
	final, ok := stagefmt.ResolveFile(tab, orig)
	if !ok {
		return "", false
	}
	ent, ok := stagefmt.Find(tab, final)
	return orig, ok && privilegedMode(ent.Mode)
}

package node

import (
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/dlbundle/dlbundle/internal/trustpath"
)

// stageRefName is the file in a stage that records the image reference it
// was staged from (a path or an oci:// reference), so that 'dlbundle ls'
// can say which image a sha256-... directory is. The shim never reads it.
const stageRefName = "ref"

// writeStageRef records ref in the stage being built at dir. A failure only
// costs ls its name for the stage, so it is not one.
func writeStageRef(dir, ref string) {
	_ = os.WriteFile(filepath.Join(dir, stageRefName), []byte(ref+"\n"), 0o444)
}

// StageRef is the image reference stage name of dir was staged from, or ""
// when it was staged by a dlbundle that did not record it.
func StageRef(dir, name string) string {
	f, _, err := trustpath.For(trustpath.Private).OpenOwn(filepath.Join(dir, name, stageRefName))
	if err != nil {
		return ""
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4097))
	if err != nil || len(b) > 4096 {
		return ""
	}
	return strings.TrimSuffix(string(b), "\n")
}

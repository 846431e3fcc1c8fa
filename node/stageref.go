package node

import (
	"io"
	"path/filepath"
	"strings"

	"github.com/dlbundle/dlbundle/internal/trustpath"
	"golang.org/x/sys/unix"
)

// stageRefName is the file in a stage that records the image reference it
// was staged from (a path or an oci:// reference), so that 'dlbundle ls'
// can say which image a sha256-... directory is. The shim never reads it.
const stageRefName = "ref"

// writeStageRef records ref in the stage being built at dir. A failure only
// costs ls its name for the stage, so it is not one.
func writeStageRef(dir, ref string) {
	d, err := trustpath.For(trustpath.Private).WalkDir(dir)
	if err != nil {
		return
	}
	defer d.Close()
	fd, err := unix.Openat(d.FD, d.Name(stageRefName), unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o444)
	if err != nil {
		return
	}
	unix.Write(fd, []byte(ref+"\n"))
	unix.Close(fd)
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

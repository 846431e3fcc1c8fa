// Package abspath makes a path absolute without a file-system lookup. It
// is apart so that the node side, the rank side and the CLI share one
// definition without importing one another. It must not stat anything.
package abspath

import (
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Abs is filepath.Abs without a file-system lookup: os.Getwd stats $PWD
// and "." (the job's working directory, usually on the shared file system),
// getcwd(2) asks the kernel only.
func Abs(p string) (string, error) {
	if filepath.IsAbs(p) {
		return filepath.Clean(p), nil
	}
	wd, err := unix.Getwd()
	if err != nil {
		return "", err
	}
	return filepath.Join(wd, p), nil
}

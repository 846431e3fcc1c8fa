package loader

import (
	"path/filepath"

	"golang.org/x/sys/unix"
)

// AbsPath is filepath.Abs without a file-system lookup: os.Getwd stats $PWD
// and "." (the job's working directory, usually on the shared file system),
// getcwd(2) asks the kernel only.
func AbsPath(p string) (string, error) {
	if filepath.IsAbs(p) {
		return filepath.Clean(p), nil
	}
	wd, err := unix.Getwd()
	if err != nil {
		return "", err
	}
	return filepath.Join(wd, p), nil
}

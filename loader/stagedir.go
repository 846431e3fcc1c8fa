package loader

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// StageDirEnv overrides the default stage directory (as --stage-dir does).
const StageDirEnv = "DLBUNDLE_STAGE_DIR"

// DefaultStageDir is where a node keeps its staged images when neither
// --stage-dir nor DLBUNDLE_STAGE_DIR says otherwise: /dev/shm/dlbundle-<uid>
// when /dev/shm is a writable tmpfs (memory: shared by every rank, gone at
// reboot), else ${TMPDIR:-/tmp}/dlbundle-<uid>.
func DefaultStageDir() string {
	name := "dlbundle-" + strconv.Itoa(os.Getuid())
	if isWritableTmpfs("/dev/shm") {
		return filepath.Join("/dev/shm", name)
	}
	tmp := os.Getenv("TMPDIR")
	if tmp == "" {
		tmp = "/tmp"
	}
	return filepath.Join(tmp, name)
}

// ResolveStageDir returns the stage directory to use: flag, then environment, then default.
func ResolveStageDir(flag string) string {
	if flag == "" {
		flag = os.Getenv(StageDirEnv)
	}
	if flag != "" {
		return ExpandStageDir(flag, os.Getenv) // %u %j %n %h %t: stagepattern.go
	}
	return DefaultStageDir()
}

func isWritableTmpfs(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		return false
	}
	return unix.Access(dir, unix.W_OK|unix.X_OK) == nil
}

// ErrUnsafeStageDir is wrapped by every refusal of a stage directory that
// another user could write into.
var ErrUnsafeStageDir = errors.New("unsafe stage dir")

// OpenStageDir creates dir (mode 0700, parents as needed) if it does not exist
// and checks it every time: it must be a real directory (not a symlink), owned
// by the calling user, and not writable by group or others. Anything else is
// refused, because whoever can write there can plant a library that every
// rank would load. It returns the absolute, cleaned path.
func OpenStageDir(dir string) (string, error) {
	abs, err := AbsPath(dir)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return "", fmt.Errorf("create parent of stage dir %s: %w; use --stage-dir", abs, err)
	}
	// Mkdir, not MkdirAll: MkdirAll would follow a planted symlink silently.
	if err := os.Mkdir(abs, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("create stage dir %s: %w; use --stage-dir", abs, err)
	}
	if err := checkStageDir(abs); err != nil {
		return "", err
	}
	return abs, nil
}

// checkStageDir refuses a stage directory that someone else could write into.
func checkStageDir(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("stage dir %s: %w; use --stage-dir", dir, err)
	}
	refuse := func(why string) error {
		return fmt.Errorf("%w: stage dir %s %s; refusing (library injection risk); use --stage-dir",
			ErrUnsafeStageDir, dir, why)
	}
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return refuse("is a symbolic link")
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return refuse("is not a directory")
	case int(st.Uid) != os.Getuid():
		return refuse(fmt.Sprintf("is owned by uid %d, not %d", st.Uid, os.Getuid()))
	case st.Mode&0o022 != 0:
		return refuse(fmt.Sprintf("has mode %#o (group or world writable)", st.Mode&0o7777))
	}
	return nil
}

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
	if flag != "" {
		return flag
	}
	if env := os.Getenv(StageDirEnv); env != "" {
		return env
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
// rank would load.
//
// Its ancestors are checked too (checkAncestors): each must be owned by root
// or the user, and writable by nobody else unless sticky. Then no other user
// can rename any component of the path, so the path stays bound to the
// directory that was checked — for exec and for ld.so, which loads the shim
// by path long after (no descriptor can be handed over: the app must hold no
// fds). A stage dir below a directory others can write into (not sticky) is
// refused: an attacker swapping names there (renameat2 RENAME_EXCHANGE)
// between the check and the load got their preload.so loaded.
//
// It returns the absolute path with the parent's symlinks resolved (the path
// that was checked).
func OpenStageDir(dir string) (string, error) {
	abs, err := AbsPath(dir)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return "", fmt.Errorf("create parent of stage dir %s: %w; use --stage-dir", abs, err)
	}
	parent, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return "", fmt.Errorf("stage dir %s: %w; use --stage-dir", abs, err)
	}
	abs = filepath.Join(parent, filepath.Base(abs))
	if err := checkAncestors(abs, parent); err != nil {
		return "", err
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

func refuseStageDir(dir, why string) error {
	return fmt.Errorf("%w: stage dir %s %s; refusing (library injection risk); use --stage-dir",
		ErrUnsafeStageDir, dir, why)
}

// checkAncestors checks every directory below / down to parent (symlinks
// resolved): owned by root or the user, and not writable by group or others
// unless sticky (then others cannot rename what they do not own, and the
// next component is checked for its owner in turn). / itself is not looked
// at: no one can rename it, and where others could write into it they could
// replace /lib and every library on the node anyway (and an image bundles
// /: a stat of it would be an operation on a bundled path at every exec).
func checkAncestors(dir, parent string) error {
	uid := uint32(os.Getuid())
	p := parent
	for p != "/" {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return fmt.Errorf("stage dir %s: %w; use --stage-dir", dir, err)
		}
		switch {
		case st.Mode&unix.S_IFMT != unix.S_IFDIR:
			return refuseStageDir(dir, fmt.Sprintf("lies below %s, which is no longer a directory", p))
		case st.Uid != 0 && st.Uid != uid:
			return refuseStageDir(dir, fmt.Sprintf("lies below %s, which is owned by uid %d (only root or uid %d may own its ancestors)", p, st.Uid, uid))
		case st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0:
			return refuseStageDir(dir, fmt.Sprintf("lies below %s, which has mode %#o (writable by others and not sticky: they could swap the stage dir)", p, st.Mode&0o7777))
		}
		p = filepath.Dir(p)
	}
	return nil
}

// checkStageDir refuses a stage directory that someone else could write
// into. It opens the directory itself (O_NOFOLLOW|O_DIRECTORY: a symlink or
// anything else fails) and checks what it opened by fstat.
func checkStageDir(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		var st unix.Stat_t
		switch {
		case unix.Lstat(dir, &st) != nil:
		case st.Mode&unix.S_IFMT == unix.S_IFLNK:
			return refuseStageDir(dir, "is a symbolic link")
		case st.Mode&unix.S_IFMT != unix.S_IFDIR:
			return refuseStageDir(dir, "is not a directory")
		}
		return fmt.Errorf("stage dir %s: %w; use --stage-dir", dir, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stage dir %s: %w; use --stage-dir", dir, err)
	}
	switch {
	case int(st.Uid) != os.Getuid():
		return refuseStageDir(dir, fmt.Sprintf("is owned by uid %d, not %d", st.Uid, os.Getuid()))
	case st.Mode&0o022 != 0:
		return refuseStageDir(dir, fmt.Sprintf("has mode %#o (group or world writable)", st.Mode&0o7777))
	}
	return nil
}

package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/internal/abspath"
	"github.com/dlbundle/dlbundle/internal/trustpath"
	"github.com/dlbundle/dlbundle/internal/untrusted"
	"github.com/dlbundle/dlbundle/loader/stagefmt"
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

// OpenStageDirFor resolves the stage directory from the --stage-dir value
// (flag, then DLBUNDLE_STAGE_DIR, then the default) and opens it
// (OpenStageDir). A failure ends with advice that fits how the directory was
// chosen: "use --stage-dir" only when the user chose none. squat is non-nil
// when another user had taken the name and a private fallback is used
// (stagedirsquat.go): the caller says so once (Squat.Warning).
func OpenStageDirFor(flag string) (dir string, squat *Squat, err error) {
	chosen := flag != "" || os.Getenv(StageDirEnv) != ""
	asked := ResolveStageDir(flag)
	dir, squat, err = openStageDir(asked)
	if err != nil {
		return "", nil, stageDirAdvice(err, asked, chosen)
	}
	return dir, squat, nil
}

// StageDirSourceEnv names, for the messages, who set the stage dir when a
// launcher plugin passed its site's setting as --stage-dir (the Slurm
// plugin's stage_dir= in plugstack.conf): the user cannot change it, the
// site's administrator can.
const StageDirSourceEnv = "DLBUNDLE_STAGE_DIR_SOURCE"

func stageDirAdvice(err error, dir string, chosen bool) error {
	if src := os.Getenv(StageDirSourceEnv); src != "" && chosen {
		return fmt.Errorf("%w; %s is the site's setting (%s): ask the site's administrator for a stage dir that only its user can write (and whose ancestors only that user or root can)", err, dir, src)
	}
	if !chosen {
		return fmt.Errorf("%w; use --stage-dir DIR (or %s) to stage elsewhere", err, StageDirEnv)
	}
	return fmt.Errorf("%w; %s was given by --stage-dir or %s: give another directory, one that only you can write (and whose ancestors only you or root can)", err, dir, StageDirEnv)
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
// Its ancestors are checked too, on the way down (openParent): each must be
// owned by root or the user, and writable by nobody else unless sticky; a
// symbolic link on the way is followed only if root or the user owns it.
// Then no other user can rename any component of the path, so the path stays
// bound to the directory that was checked — for exec and for ld.so, which
// loads the shim by path long after (no descriptor can be handed over: the
// app must hold no fds). A stage dir below a directory others can write into
// (not sticky) is refused: an attacker swapping names there
// (renameat2 RENAME_EXCHANGE) between the check and the load got their
// preload.so loaded.
//
// When another user has taken the name in a shared sticky directory (mkdir
// /dev/shm/dlbundle-<uid>: anyone can), a private fallback is used instead
// (stagedirsquat.go), which OpenStageDirFor reports.
//
// It returns the absolute path with symlinks resolved (the path that was
// checked).
func OpenStageDir(dir string) (string, error) {
	d, _, err := openStageDir(dir)
	return d, err
}

func openStageDir(dir string) (string, *Squat, error) {
	abs, err := abspath.Abs(dir)
	if err != nil {
		return "", nil, err
	}
	// Before anything is created: a path the shim cannot use is refused at
	// once (a 4,000-byte one used to create its ~2,000 parents first).
	if err := stagefmt.CheckStagePath(abs); err != nil {
		return "", nil, err
	}
	if err := checkLoaderSplit(abs); err != nil {
		return "", nil, err
	}
	pd, parent, pst, err := openParent(abs)
	if err != nil {
		return "", nil, err
	}
	defer pd.close()
	abs = filepath.Join(parent, filepath.Base(abs))
	name := filepath.Base(abs)
	// Mkdirat, not MkdirAll: nothing is followed.
	if err := unix.Mkdirat(pd.fd, pd.name(name), 0o700); err != nil && err != unix.EEXIST {
		return "", nil, fmt.Errorf("create stage dir %s: %w", abs, err)
	}
	var squat *Squat
	var st unix.Stat_t
	if unix.Fstatat(pd.fd, pd.name(name), &st, unix.AT_SYMLINK_NOFOLLOW) == nil && int(st.Uid) != os.Getuid() && isShared(pst) {
		squat = &Squat{Asked: abs, Owner: st.Uid}
		if name, err = squatFallback(pd, parent, name); err != nil {
			return "", nil, err
		}
		abs = filepath.Join(parent, name)
		squat.Fallback = abs
	}
	if err := checkStageDirAt(pd, name, abs); err != nil {
		return "", nil, err
	}
	return abs, squat, nil
}

// isShared reports whether a directory is writable by others and sticky
// (/tmp, /dev/shm): anyone may create a name there, no one may rename or
// remove another's.
func isShared(st *unix.Stat_t) bool {
	return st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX != 0
}

// dirAt is a directory for *at calls. The root directory is never opened
// nor looked at (an image bundles /, and an exec must make no call on a
// bundled path): fd is then AT_FDCWD and names get a leading /.
type dirAt struct{ fd int }

var rootDir = dirAt{unix.AT_FDCWD}

func (d dirAt) name(c string) string {
	if d.fd == unix.AT_FDCWD {
		return "/" + c
	}
	return c
}

func (d dirAt) close() {
	if d.fd != unix.AT_FDCWD {
		unix.Close(d.fd)
	}
}

// openParent opens the directory that holds abs (O_PATH) by package
// trustpath's walk under its Private rule: down from / one component at a
// time with *at calls, a missing directory created (mode 0755) in the
// directory just checked, a symbolic link followed only when root or the
// user owns it (another user's link in /tmp must not decide where root
// creates directories), every directory entered owned by root or the user
// and writable by nobody else unless sticky, and nothing another user made
// in a directory every user can write. It returns the directory, its path
// with symlinks resolved, and its mode and owner (0755 root for /).
func openParent(abs string) (d dirAt, resolved string, st *unix.Stat_t, err error) {
	return walkParent(abs, true)
}

// walkParent is openParent, creating the missing directories only when
// create is set (else a missing one is an ENOENT *os.PathError).
func walkParent(abs string, create bool) (d dirAt, resolved string, st *unix.Stat_t, err error) {
	w := &trustpath.Walker{Rule: trustpath.Private, Uid: uint32(os.Getuid()), Create: create}
	dir, err := w.WalkDir(filepath.Dir(abs))
	if err != nil {
		var refusal *trustpath.Error
		if errors.As(err, &refusal) {
			return rootDir, "", nil, refuseStageDir(abs, "lies below "+refusal.At+", "+refusal.Why)
		}
		return rootDir, "", nil, fmt.Errorf("stage dir %s: %w", abs, err)
	}
	return dirAt{dir.FD}, dir.Path, &unix.Stat_t{Mode: dir.Node.Mode, Uid: dir.Node.Uid, Dev: dir.Node.Dev, Ino: dir.Node.Ino}, nil
}

func refuseStageDir(dir, why string) error {
	return fmt.Errorf("%w: stage dir %s %s; refusing (library injection risk)",
		ErrUnsafeStageDir, dir, why)
}

// checkStageDirAt refuses a stage directory that someone else could write
// into. It opens the directory itself (O_NOFOLLOW|O_DIRECTORY: a symlink or
// anything else fails) and checks what it opened by fstat.
func checkStageDirAt(pd dirAt, name, dir string) error {
	fd, err := unix.Openat(pd.fd, pd.name(name), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		var st unix.Stat_t
		switch {
		case unix.Fstatat(pd.fd, pd.name(name), &st, unix.AT_SYMLINK_NOFOLLOW) != nil:
		case st.Mode&unix.S_IFMT == unix.S_IFLNK:
			return refuseStageDir(dir, "is a symbolic link")
		case st.Mode&unix.S_IFMT != unix.S_IFDIR:
			return refuseStageDir(dir, "is not a directory")
		}
		return fmt.Errorf("stage dir %s: %w", dir, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stage dir %s: %w", dir, err)
	}
	switch {
	case int(st.Uid) != os.Getuid():
		return refuseStageDir(dir, fmt.Sprintf("is owned by uid %d, not %d", st.Uid, os.Getuid()))
	case st.Mode&0o022 != 0:
		return refuseStageDir(dir, fmt.Sprintf("has mode %#o (group or world writable)", st.Mode&0o7777))
	}
	return nil
}

// checkLoaderSplit refuses a stage dir that ld.so would not read back as one
// path. The shim reaches every process through LD_PRELOAD, which glibc
// splits on spaces and colons, and LD_AUDIT, split on colons, neither with
// any escaping; a piece that is a relative path is then opened relative to
// the process's working directory: with --stage-dir "/dev/shm/v dir" run
// from /tmp, "dir/sha256-<digest>/shim/preload-<glibc>.so" was loaded from
// /tmp, where another user had put it. Both variables also expand $ORIGIN,
// $LIB and $PLATFORM. Refused before anything is created; control
// characters too (they would forge lines in messages and reports).
func checkLoaderSplit(dir string) error {
	for i := 0; i < len(dir); i++ {
		c := dir[i]
		var what string
		switch {
		case c == ' ':
			what = "a space, where LD_PRELOAD splits"
		case c == ':':
			what = "a colon, where LD_PRELOAD and LD_AUDIT split"
		case c == '$':
			what = "a '$', which LD_PRELOAD and LD_AUDIT expand ($ORIGIN, $LIB, $PLATFORM)"
		case c < ' ' || c == 0x7f:
			what = "a control character"
		default:
			continue
		}
		return fmt.Errorf("stage dir %s contains %s: ld.so would load the shim from another path (a piece that is relative is looked up from the working directory, where another user may have put a library); give a stage dir without spaces, colons, '$' or control characters",
			untrusted.Quote(dir), what)
	}
	return nil
}

// LookupStageDirFor is OpenStageDirFor for those that only read (dlbundle
// ls): the same resolution and checks, but nothing is created, neither the
// stage dir, nor its parents, nor a fallback for a squatted name. found is
// false when there is no stage dir (yet): dir is then where it would be.
func LookupStageDirFor(flag string) (dir string, squat *Squat, found bool, err error) {
	chosen := flag != "" || os.Getenv(StageDirEnv) != ""
	asked := ResolveStageDir(flag)
	dir, squat, found, err = lookupStageDir(asked)
	if err != nil {
		return "", nil, false, stageDirAdvice(err, asked, chosen)
	}
	return dir, squat, found, nil
}

func lookupStageDir(dir string) (string, *Squat, bool, error) {
	abs, err := abspath.Abs(dir)
	if err != nil {
		return "", nil, false, err
	}
	if err := stagefmt.CheckStagePath(abs); err != nil {
		return "", nil, false, err
	}
	if err := checkLoaderSplit(abs); err != nil {
		return "", nil, false, err
	}
	pd, parent, pst, err := walkParent(abs, false)
	if errors.Is(err, unix.ENOENT) {
		return abs, nil, false, nil
	}
	if err != nil {
		return "", nil, false, err
	}
	defer pd.close()
	name := filepath.Base(abs)
	abs = filepath.Join(parent, name)
	var st unix.Stat_t
	if err := unix.Fstatat(pd.fd, pd.name(name), &st, unix.AT_SYMLINK_NOFOLLOW); err == unix.ENOENT {
		return abs, nil, false, nil
	}
	var squat *Squat
	if int(st.Uid) != os.Getuid() && isShared(pst) {
		squat = &Squat{Asked: abs, Owner: st.Uid}
		if name = findFallback(pd, name); name == "" {
			return abs, squat, false, nil
		}
		abs = filepath.Join(parent, name)
		squat.Fallback = abs
	}
	if err := checkStageDirAt(pd, name, abs); err != nil {
		return "", nil, false, err
	}
	return abs, squat, true, nil
}

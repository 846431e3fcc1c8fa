package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/internal/trustpath"
)

// The paths the app's processes write to, --report FILE and
// DLBUNDLE_DEBUG_DIR, go through the one rule (internal/trustpath's Write
// rule: nothing another user made in a world-writable directory, only
// root's or the caller's symbolic links followed) when exec checks them.
// The shim opens them later by name, at each process's exit or decision,
// where nobody could be told of a refusal: exec hands it the path with
// every symbolic link resolved and absolute, so that the shim's open
// (O_NOFOLLOW, then a regular file of its own effective uid, else nothing
// written) goes through the same directories the walk trusted; none of
// them can be renamed or replaced by another user, since the rule refused
// any they could.

// walkLogDir walks dir (the directory a log goes in) by the Write rule.
func walkLogDir(dir, flag string) (*trustpath.Dir, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	d, err := (&trustpath.Walker{Rule: trustpath.Write, Uid: uint32(os.Geteuid())}).WalkDir(abs)
	var refusal *trustpath.Error
	switch {
	case errors.As(err, &refusal):
		return nil, fmt.Errorf("%s %s: %s, %s; refusing to write the app's logs where another user can swap or read them: choose a directory of yours", flag, dir, refusal.At, refusal.Why)
	case err != nil:
		return nil, fmt.Errorf("%s %s: %w; choose an existing directory of yours", flag, dir, err)
	}
	return d, nil
}

// checkReportFile makes sure that the app's processes can append to --report
// FILE (they do it at exit, where nobody could be told that it failed) and
// that exec cannot hang on it: its directory is walked by the rule, then
// FILE is opened from the walked directory as the shim opens it (O_APPEND,
// O_NOFOLLOW) but non-blocking, created if needed, and must be a regular
// file of the user's own. A FIFO there (a shared path another user chose)
// blocked exec for good; another user's file would get this user's
// reports (what the app looked up) appended for them to read; a directory
// another user made in /tmp would let them swap the file. It returns the
// path to hand the shim (absolute, symbolic links resolved).
func checkReportFile(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	d, err := walkLogDir(filepath.Dir(abs), "--report's directory")
	if err != nil {
		return "", err
	}
	defer d.Close()
	base := filepath.Base(abs)
	resolved := d.Join(base)
	fd, err := unix.Openat(d.FD, d.Name(base), unix.O_WRONLY|unix.O_CREAT|unix.O_APPEND|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0o644)
	switch {
	case errors.Is(err, unix.ELOOP):
		// A symlink planted at the path: the shim will not follow it
		// and the app runs, but not in silence.
		fmt.Fprintf(os.Stderr, "dlbundle exec: warning: --report %s is a symbolic link; the shim does not follow it: no report will be written\n", path)
		return resolved, nil
	case errors.Is(err, unix.ENXIO): // a FIFO without a reader
		return "", fmt.Errorf("--report %s is a FIFO; refusing (the app's processes would block on it): choose a regular file", path)
	case err != nil:
		return "", fmt.Errorf("--report %s: %w; the app's processes could not write their reports there: choose a writable path", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", fmt.Errorf("--report %s: %w", path, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return "", fmt.Errorf("--report %s is not a regular file; refusing (the app's processes would block or fail on it): choose a regular file", path)
	case int(st.Uid) != os.Geteuid():
		return "", fmt.Errorf("--report %s belongs to uid %d, not to you; refusing to append your processes' reports to another user's file: choose a path of your own", path, st.Uid)
	}
	return resolved, nil
}

// checkDebugDir walks DLBUNDLE_DEBUG_DIR, when the shim will log there
// (--debug, or DLBUNDLE_DEBUG=1 in the environment), by the rule, and hands
// the shim its resolved path.
func checkDebugDir(debug bool) error {
	dir := os.Getenv("DLBUNDLE_DEBUG_DIR")
	if dir == "" || !debug && os.Getenv("DLBUNDLE_DEBUG") != "1" {
		return nil
	}
	d, err := walkLogDir(dir, "DLBUNDLE_DEBUG_DIR")
	if err != nil {
		return err
	}
	defer d.Close()
	return os.Setenv("DLBUNDLE_DEBUG_DIR", d.Path)
}

package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A squatted stage dir. In a shared sticky directory
// (/dev/shm, /tmp) anyone can create any name, so another user can take
// /dev/shm/dlbundle-<uid> before its owner does; every exec of that user on
// the node then had to refuse it (it is not theirs) and failed until reboot.
//
// Instead, when the name is taken by another uid, the user's processes use a
// fallback beside it, <name>.<16 random hex digits>, mode 0700, that no one
// can predict and so no one can take first. The other processes of the user
// find it by scanning the parent for that pattern and keeping only what
// could only the user (or root) have made: a real directory (not a symlink),
// owned by the user, not accessible to group or others; a name alone proves
// nothing (anyone can mkdir dlbundle-<uid>.0000000000000000). Creation is
// serialized between the user's processes by a flock on the parent directory
// (waited for at most squatLockWait, so that a user who holds that lock
// forever delays, never stops, a job): the first creates, the others find
// it. If several exist (a lock that timed out), every process picks the same
// one: the smallest name.

// Squat says that the stage dir asked for belongs to someone else and which
// fallback is used instead.
type Squat struct {
	Asked    string // the stage dir asked for
	Owner    uint32 // owner of what sits at Asked
	Fallback string // the private directory used instead
}

// Warning is the one line a job prints about it.
func (s *Squat) Warning() string {
	return fmt.Sprintf("stage dir %s belongs to uid %d, not to you (another user created it first); staging in %s instead, which only you can write; an admin may remove %s",
		s.Asked, s.Owner, s.Fallback, s.Asked)
}

// squatLockWait bounds the wait for the parent directory's flock.
var squatLockWait = 2 * time.Second

// squatFallback returns the name (in pd, the directory parent) of the
// fallback for name, creating it if there is none.
func squatFallback(pd dirAt, parent, name string) (string, error) {
	key := fallbackKeyPrefix + filepath.Join(parent, name)
	if f := recallFallback(pd, name, key); f != "" {
		return f, nil
	}
	if f := findFallback(pd, name); f != "" {
		rememberFallback(key, f)
		return f, nil
	}
	// A descriptor that flock accepts (O_PATH does not); read permission on
	// a shared directory is the rule. Without it, no lock: at worst two
	// fallbacks, of which every process picks the same.
	if lfd, err := unix.Openat(pd.fd, pd.name("."), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
		f := os.NewFile(uintptr(lfd), parent)
		ctx, cancel := context.WithTimeout(context.Background(), squatLockWait)
		_ = lockFile(ctx, f) // on timeout: go on without it
		cancel()
		defer f.Close() // drops the lock
	}
	if f := recallFallback(pd, name, key); f != "" {
		return f, nil
	}
	if f := findFallback(pd, name); f != "" {
		rememberFallback(key, f)
		return f, nil
	}
	f := name + "." + randomName()
	if err := unix.Mkdirat(pd.fd, pd.name(f), 0o700); err != nil {
		return "", fmt.Errorf("create a private stage dir beside %s/%s (which another user owns): %w", parent, name, err)
	}
	// What we made is a candidate like any other; if another process's
	// lock timed out and it made one too, both pick the smallest.
	if g := findFallback(pd, name); g != "" {
		f = g
	}
	rememberFallback(key, f)
	return f, nil
}

// The fallback's name is remembered in the kernel's keyring of the user
// (persistent: it outlives the user's processes; else the user keyring),
// which no other user can read or write, so that the user's next processes
// find it at once: a scan of the parent costs a getdents of every name and
// an fstatat of every name that looks like a fallback, and another user
// can make as many of those as the tmpfs has inodes (200,000 decoys made
// every exec of the victim take 0.6-0.8 s). A remembered name is used only
// if it is still a private directory of the user's (isFallback); without a
// keyring (a seccomp profile that forbids keyctl), or once the key has
// expired, the parent is scanned once and the name remembered again.
const fallbackKeyPrefix = "dlbundle-stage-fallback:"

// userKeyring is the keyring that remembers fallbacks, or 0 (none).
func userKeyring() int {
	if k, err := unix.KeyctlInt(unix.KEYCTL_GET_PERSISTENT, -1, unix.KEY_SPEC_PROCESS_KEYRING, 0, 0); err == nil {
		return k
	}
	return unix.KEY_SPEC_USER_KEYRING
}

// recallFallback returns the fallback remembered under key if it is still a
// fallback of name in pd.
func recallFallback(pd dirAt, name, key string) string {
	id, err := unix.KeyctlSearch(userKeyring(), "user", key, 0)
	if err != nil {
		return ""
	}
	var buf [64]byte
	n, err := unix.KeyctlBuffer(unix.KEYCTL_READ, id, buf[:], 0)
	if err != nil || n > len(buf) {
		return ""
	}
	if f := string(buf[:n]); isFallback(pd, name, f) {
		return f
	}
	return ""
}

// rememberFallback records f under key (best effort).
func rememberFallback(key, f string) {
	unix.AddKey("user", key, []byte(f), userKeyring())
}

// isFallback reports whether n, in pd, is a fallback of name: named
// <name>.<16 hex>, a directory owned by the user and closed to everyone
// else.
func isFallback(pd dirAt, name, n string) bool {
	suffix, ok := strings.CutPrefix(n, name+".")
	if !ok || len(suffix) != 16 || strings.Trim(suffix, "0123456789abcdef") != "" {
		return false
	}
	var st unix.Stat_t
	if unix.Fstatat(pd.fd, pd.name(n), &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Uid == uint32(os.Getuid()) && st.Mode&0o077 == 0
}

// findFallback returns the smallest name <name>.<16 hex> in the directory
// pd that is a directory owned by the user and closed to everyone else.
func findFallback(pd dirAt, name string) string {
	dfd, err := unix.Openat(pd.fd, pd.name("."), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return ""
	}
	d := os.NewFile(uintptr(dfd), name)
	names, _ := d.Readdirnames(-1)
	d.Close()
	sort.Strings(names)
	for _, n := range names {
		if isFallback(pd, name, n) {
			return n
		}
	}
	return ""
}

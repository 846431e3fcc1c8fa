package node

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// asUserFS runs fn on a thread of its own whose file-system credentials
// are u's (setfsuid, setfsgid, setgroups: per thread in the kernel;
// changing fsuid from 0 drops CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH,
// CAP_CHOWN and CAP_FOWNER), so that every open, mkdir, symlink and rename
// fn makes is allowed or refused by the kernel as u, and what it creates is
// u's without a chown. This is how root works in a user's stage dir and
// opens a user's image: whether u may search each directory on the way,
// read the image or write the stage dir is the kernel's answer, not a
// comparison of owners. The thread is never given back to the runtime
// (LockOSThread without Unlock): it ends with the goroutine, its
// credentials with it. Descriptors fn opens are the process's, usable
// after.
func asUserFS(u Account, fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := becomeFSUser(u); err != nil {
			ch <- fmt.Errorf("take uid %d's file-system credentials: %w", u.Uid, err)
			return
		}
		ch <- fn()
	}()
	return <-ch
}

// openImageFileAsUser is openImageFileAs for root staging for u (a
// Prolog's stage --user, SLURM_JOB_UID), with u's file-system credentials
// (asUserFS): a victim's 0600 image in a 0700 home is refused to the
// attacker's job.
func openImageFileAsUser(path string, u Account) (f *os.File, n int64, err error) {
	uerr := asUserFS(u, func() error {
		f, n, err = openImageFileAs(path, uint32(u.Uid))
		if err != nil && (os.IsPermission(err) || errors.Is(err, unix.EACCES)) {
			err = fmt.Errorf("image %s: uid %d may not read it (%v); refusing to stage it for them: root stages only what the job's user could read themselves", path, u.Uid, err)
		}
		return nil
	})
	if uerr != nil {
		return nil, 0, fmt.Errorf("open image %s: %w", path, uerr)
	}
	return f, n, err
}

// becomeFSUser sets this thread's (only) groups and file-system ids to
// u's, with raw system calls: glibc and Go's syscall.Setgroups would apply
// them to every thread.
func becomeFSUser(u Account) error {
	groups := make([]uint32, 0, len(u.Groups))
	for _, g := range u.Groups {
		groups = append(groups, uint32(g))
	}
	var p unsafe.Pointer
	if len(groups) > 0 {
		p = unsafe.Pointer(&groups[0])
	}
	if _, _, e := syscall.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(p), 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	syscall.RawSyscall(unix.SYS_SETFSGID, uintptr(u.Gid), 0, 0)
	syscall.RawSyscall(unix.SYS_SETFSUID, uintptr(u.Uid), 0, 0)
	// Each returns the previous id; asking to set an invalid one returns
	// the current without changing it.
	gid, _, _ := syscall.RawSyscall(unix.SYS_SETFSGID, ^uintptr(0), 0, 0)
	uid, _, _ := syscall.RawSyscall(unix.SYS_SETFSUID, ^uintptr(0), 0, 0)
	if int(uint32(uid)) != u.Uid || int(uint32(gid)) != u.Gid {
		return fmt.Errorf("fsuid %d fsgid %d after setfsuid(%d) setfsgid(%d)", uint32(uid), uint32(gid), u.Uid, u.Gid)
	}
	return nil
}

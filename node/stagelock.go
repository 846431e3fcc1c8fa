package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/internal/trustpath"
)

// stageLock is an exclusive flock(2) on a file in the stage directory. The
// kernel drops it when its holder dies, even by SIGKILL, so a lock is never
// left behind and anything the dead holder had half-built is known stale.
type stageLock struct{ f *os.File }

// lockStage takes the lock, waiting for the holder (the rank that is staging)
// as long as ctx allows. onWait is called once if the lock is busy. waited is
// the time the wait began (zero if the lock was free): a failure recorded by
// the holder after it concerns this waiter (readFailure).
//
// A waiter blocks in flock(2) on a thread of its own, so that 63 waiters cost
// no CPU (polling every 5 ms used both cores of a node); ctx (SIGTERM, a
// job's time limit) ends the wait, and the blocked call, if it gets the lock
// later, drops it at once.
func lockStage(ctx context.Context, path string, onWait func()) (l *stageLock, waited time.Time, err error) {
	f, err := openLockFile(path)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("open stage lock: %w", err)
	}
	err = flockWait(ctx, f, func() {
		waited = time.Now()
		if onWait != nil {
			onWait()
		}
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, time.Time{}, fmt.Errorf("waiting for the stage lock %s: %w", path, ctx.Err())
		}
		return nil, time.Time{}, fmt.Errorf("lock %s: %w", path, err)
	}
	return &stageLock{f: f}, waited, nil
}

// openLockFile opens (creating, 0600) the lock file at path, by descriptor
// in its directory walked by the Private rule (the stage dir, as staging
// checked it): never through a link, and only a regular file.
func openLockFile(path string) (*os.File, error) {
	d, err := trustpath.For(trustpath.Private).WalkDir(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	name := filepath.Base(path)
	fd, err := unix.Openat(d.FD, d.Name(name), unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file; remove it", path)
	}
	return f, nil
}

// lockFile takes an exclusive flock on f, waiting as long as ctx allows.
func lockFile(ctx context.Context, f *os.File) error { return flockWait(ctx, f, nil) }

// flockWait takes an exclusive flock on f; if it is busy it calls onBusy
// (if set) and waits in flock(2) on a thread of its own until it gets the
// lock or ctx ends. On failure f is closed: closing is what drops a lock
// that the blocked call gets too late.
func flockWait(ctx context.Context, f *os.File, onBusy func()) error {
	fd := int(f.Fd())
	err := flock(fd, unix.LOCK_EX|unix.LOCK_NB)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EWOULDBLOCK) {
		f.Close()
		return err
	}
	if onBusy != nil {
		onBusy()
	}
	done := make(chan error, 1)
	go func() { done <- flock(fd, unix.LOCK_EX) }()
	select {
	case err := <-done:
		if err != nil {
			f.Close()
		}
		return err
	case <-ctx.Done():
		go func() { <-done; f.Close() }() // closing drops a lock got too late
		return ctx.Err()
	}
}

// flock is flock(2), restarted after a signal handler ran.
func flock(fd, how int) error {
	for {
		if err := unix.Flock(fd, how); err != unix.EINTR {
			return err
		}
	}
}

func (l *stageLock) unlock() error { return l.f.Close() } // closing drops the flock

// stageLockCtl lets what Stage calls under the lock (StageRequest.Open) let
// the lock go while it waits on the network, and take it again: the node's
// other images stage meanwhile (fetchImage). Stage puts it in the context it
// passes to Open.
type stageLockCtl struct {
	l        *stageLock
	path     string
	released bool
}

type stageLockCtlKey struct{}

func (c *stageLockCtl) release() {
	if !c.released {
		c.l.f.Close() // closing drops the flock
		c.released = true
	}
}

func (c *stageLockCtl) reacquire(ctx context.Context) error {
	if !c.released {
		return nil
	}
	nl, _, err := lockStage(ctx, c.path, nil)
	if err != nil {
		return err
	}
	c.l.f, c.released = nl.f, false
	return nil
}

package loader

import (
	"context"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// stageLock is an exclusive flock(2) on a file in the stage directory. The
// kernel drops it when its holder dies, even by SIGKILL, so a lock is never
// left behind and anything the dead holder had half-built is known stale.
type stageLock struct{ f *os.File }

// lockStage takes the lock, waiting for the holder (the rank that is staging)
// as long as ctx allows. onWait is called once if the lock is busy.
func lockStage(ctx context.Context, path string, onWait func()) (*stageLock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open stage lock: %w", err)
	}
	waited := false
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return &stageLock{f: f}, nil
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if !waited && onWait != nil {
			onWait()
		}
		waited = true
		// Poll rather than block in flock so that ctx (a job's time limit,
		// Ctrl-C) can end the wait.
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for the stage lock %s: %w", path, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (l *stageLock) unlock() error { return l.f.Close() } // closing drops the flock

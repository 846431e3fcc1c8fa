package slowfs_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlbundle/dlbundle/internal/slowfs"
)

// A process that unshares its mount namespace while slowfs is mounted (as
// slurmd does for a private /tmp) keeps a copy of the mount, and with it the
// FUSE connection: Unmount must still return, and the copy must be cut off.
func TestUnmountReturnsWhileAnotherNamespaceHoldsACopy(t *testing.T) {
	src, _ := tree(t)
	mnt := t.TempDir()
	f, err := slowfs.Mount(src, mnt, slowfs.Costs{})
	if errors.Is(err, slowfs.ErrNotPermitted) {
		t.Skipf("skipping: this test needs a FUSE mount: %v", err)
	}
	must(t, err)
	t.Cleanup(func() { _ = slowfs.ForceUnmount(mnt) })

	holder := exec.Command("unshare", "--mount", "--propagation", "private", "sleep", "300")
	must(t, holder.Start())
	t.Cleanup(func() {
		_ = holder.Process.Kill()
		_ = holder.Wait()
	})
	pid := holder.Process.Pid
	own, _ := os.Readlink("/proc/self/ns/mnt")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
		mounts, _ := os.ReadFile(fmt.Sprintf("/proc/%d/mounts", pid))
		if ns != own && strings.Contains(string(mounts), " "+mnt+" ") {
			break
		}
		if holder.ProcessState != nil || time.Now().After(deadline) {
			t.Skipf("skipping: unshare --mount did not give a process its own mount namespace holding %s (namespaces unavailable here)", mnt)
		}
	}

	done := make(chan error, 1)
	go func() { done <- f.Unmount() }()
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(time.Minute): // a hang guard, not a timing assertion
		t.Fatal("Unmount hangs while another mount namespace holds a copy of the mount")
	}
	if slowfs.Mounted(mnt) {
		t.Error("still mounted here")
	}
	_, err = os.Stat(fmt.Sprintf("/proc/%d/root%s/a", pid, mnt))
	if !errors.Is(err, syscall.ENOTCONN) {
		t.Errorf("the copy in the other namespace: stat = %v, want ENOTCONN (connection aborted)", err)
	}
}

// Package slowfstest mounts slowfs for tests: it skips the test (the only
// acceptable skip) where FUSE cannot be mounted, and unmounts at cleanup even
// when the test failed, so no stale mounts are left behind.
package slowfstest

import (
	"errors"
	"testing"

	"github.com/dlbundle/dlbundle/internal/slowfs"
)

// Mount serves source at mountpoint with costs until the test ends.
func Mount(t testing.TB, source, mountpoint string, costs slowfs.Costs) *slowfs.FS {
	t.Helper()
	f, err := slowfs.Mount(source, mountpoint, costs)
	if errors.Is(err, slowfs.ErrNotPermitted) {
		t.Skipf("skipping: this test needs a FUSE mount and %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
		if err := slowfs.ForceUnmount(mountpoint); err != nil {
			t.Errorf("%v", err)
		}
	})
	return f
}

package slowfs

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Costs are the service times slowfs charges.
type Costs struct {
	// Metadata is the service time of one metadata operation (e.g. 200µs).
	Metadata time.Duration
	// ReadPerMiB is the time one MiB of file data takes on the shared data path.
	ReadPerMiB time.Duration
}

// FS is a mounted slowfs.
type FS struct {
	source, mountpoint string
	server             *fuse.Server
	metaQueue          server
	dataQueue          server
	metaCost, readCost atomic.Int64 // ns; changeable while mounted
	counts             counters
	recordPaths        atomic.Bool
	paths              pathCounts
	dev                string // "major:minor" of the mount: its FUSE connection in fusectl
}

// Mount serves the directory source at mountpoint (which must exist) until
// Unmount. Mounting needs /dev/fuse and root (or fusermount3).
func Mount(source, mountpoint string, costs Costs) (*FS, error) {
	source, err := filepath.Abs(source)
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(source); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("slowfs: source %s is not a directory (%v)", source, err)
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return nil, fmt.Errorf("slowfs: /dev/fuse is missing (%v); load the fuse module or run where FUSE is available: %w", err, ErrNotPermitted)
	}
	f := &FS{source: source, mountpoint: mountpoint}
	f.SetCosts(costs)

	loop, err := fs.NewLoopbackRoot(source)
	if err != nil {
		return nil, fmt.Errorf("slowfs: %w", err)
	}
	root := &node{LoopbackNode: loop.(*fs.LoopbackNode), fsys: f}
	zero := time.Duration(0)
	opts := &fs.Options{
		EntryTimeout:    &zero,
		AttrTimeout:     &zero,
		NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{
			FsName:     source,
			Name:       "slowfs",
			AllowOther: os.Geteuid() == 0, // ranks may run as other users
			// Root can mount without fusermount3; go-fuse falls back to it otherwise.
			DirectMount: true,
			// READDIRPLUS would turn every listing into a lookup per entry.
			DisableReadDirPlus: true,
		},
	}
	srv, err := fs.Mount(mountpoint, root, opts)
	if err != nil {
		// As root the mount(2) is direct; otherwise go-fuse runs fusermount3,
		// whose failures come back as text only.
		if errors.Is(err, os.ErrPermission) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) ||
			errors.Is(err, exec.ErrNotFound) || strings.Contains(err.Error(), "fusermount") {
			err = fmt.Errorf("%w: %w", ErrNotPermitted, err)
		}
		return nil, fmt.Errorf("slowfs: mounting %s at %s: %w (needs root, or fusermount3 from the fuse3 package)", source, mountpoint, err)
	}
	f.server = srv
	f.dev, _ = mountDevice(mountpoint)
	return f, nil
}

// Mountpoint is where the file system is mounted.
func (f *FS) Mountpoint() string { return f.mountpoint }

// Source is the directory being served.
func (f *FS) Source() string { return f.source }

// SetCosts changes the service times; requests already queued keep theirs.
func (f *FS) SetCosts(c Costs) {
	f.metaCost.Store(int64(c.Metadata))
	f.readCost.Store(int64(c.ReadPerMiB))
}

// Costs returns the current service times.
func (f *FS) Costs() Costs {
	return Costs{Metadata: time.Duration(f.metaCost.Load()), ReadPerMiB: time.Duration(f.readCost.Load())}
}

// Stats returns the counts since mount or the last Reset.
func (f *FS) Stats() Stats {
	s := f.counts.snapshot()
	s.MetaBusy = time.Duration(f.metaQueue.busy.Load())
	return s
}

// Reset zeroes the counts, e.g. between benchmark runs.
func (f *FS) Reset() {
	f.counts.reset()
	f.paths.reset()
	f.metaQueue.busy.Store(0)
	f.dataQueue.busy.Store(0)
}

// metadata counts one metadata operation on n (or its child name) and waits
// for the metadata server.
func (f *FS) metadata(op Op, n *node, name string) {
	f.counts.ops[op].Add(1)
	if f.recordPaths.Load() {
		f.paths.add("/" + path.Join(n.Path(nil), name))
	}
	f.metaQueue.serve(time.Duration(f.metaCost.Load()))
}

// dataRead counts n bytes read and waits for the shared data path.
func (f *FS) dataRead(n int) {
	f.counts.ops[OpRead].Add(1)
	f.counts.bytes.Add(uint64(n))
	perMiB := f.readCost.Load()
	f.dataQueue.serve(time.Duration(perMiB * int64(n) >> 20))
}

// Unmount unmounts and waits for the server to stop. When the kernel refuses
// (the mount is busy), it detaches the mount lazily so that nothing stale is
// left behind.
//
// A process that unshared its mount namespace while we were mounted (e.g. a
// slurmd started by a concurrent test) holds a copy of the mount, which keeps
// the FUSE connection open after our umount, so the server would wait
// forever: after unmountGrace the connection is aborted through fusectl, and
// the copies fail with ENOTCONN.
func (f *FS) Unmount() error {
	stopped := make(chan error, 1)
	go func() { stopped <- f.unmount() }()
	var err error
	select {
	case err = <-stopped:
	case <-time.After(unmountGrace):
		if aerr := abortConnection(f.dev); aerr != nil {
			return fmt.Errorf("slowfs: %s is unmounted but its server does not stop (a copy of the mount lives on in another mount namespace?) and aborting its FUSE connection failed: %w; it ends when this process exits", f.mountpoint, aerr)
		}
		err = <-stopped
	}
	if err != nil {
		return err
	}
	f.metaQueue.stop()
	f.dataQueue.stop()
	return nil
}

// unmountGrace is how long the server may take to stop after the umount.
const unmountGrace = 3 * time.Second

func (f *FS) unmount() error {
	err := f.server.Unmount()
	if err != nil {
		if lerr := unix.Unmount(f.mountpoint, unix.MNT_DETACH); lerr != nil && Mounted(f.mountpoint) {
			return fmt.Errorf("slowfs: unmounting %s: %v; lazy unmount: %v", f.mountpoint, err, lerr)
		}
	}
	f.server.Wait()
	return nil
}

// fusectl is where the kernel lists FUSE connections, by device number.
const fusectl = "/sys/fs/fuse/connections"

// abortConnection aborts the FUSE connection of device dev ("0:N"), mounting
// fusectl first if the system has not.
func abortConnection(dev string) error {
	major, minor, ok := strings.Cut(dev, ":")
	if !ok || major != "0" {
		return fmt.Errorf("no FUSE device number known (%q)", dev)
	}
	// The directory is named after the kernel's dev_t, which for major 0 is the minor.
	abort := filepath.Join(fusectl, minor, "abort")
	if _, err := os.Stat(abort); err != nil && !Mounted(fusectl) {
		if err := unix.Mount("fusectl", fusectl, "fusectl", 0, ""); err != nil {
			return fmt.Errorf("mounting fusectl at %s: %w", fusectl, err)
		}
	}
	return os.WriteFile(abort, []byte("1"), 0)
}

// ForceUnmount removes a slowfs mount whose server may be gone (a crashed or
// killed process leaves "transport endpoint is not connected" behind). It is
// a no-op when nothing is mounted there.
func ForceUnmount(mountpoint string) error {
	if !Mounted(mountpoint) {
		return nil
	}
	if err := unix.Unmount(mountpoint, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("slowfs: lazy unmount of %s: %w (try: fusermount3 -uz %s)", mountpoint, err, mountpoint)
	}
	return nil
}

// Mounted reports whether a file system is mounted exactly at path, from
// /proc/self/mountinfo (stat would hang or fail on a dead FUSE mount).
func Mounted(path string) bool {
	_, ok := mountDevice(path)
	return ok
}

// mountDevice returns the device number ("major:minor") of the file system
// mounted exactly at path, from /proc/self/mountinfo.
func mountDevice(path string) (string, bool) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", false
	}
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", false
	}
	defer mi.Close()
	dev, found := "", false
	sc := bufio.NewScanner(mi)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// The last mount at a path is the visible one.
		if len(fields) > 4 && unescapeMountPath(fields[4]) == abs {
			dev, found = fields[2], true
		}
	}
	return dev, found
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space, ...).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ErrNotPermitted marks a mount that failed because this machine or user may
// not mount FUSE file systems (no /dev/fuse, no permission), as opposed to a bug.
var ErrNotPermitted = errors.New("FUSE mounting not permitted here")

package slowfs_test

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlbundle/dlbundle/internal/slowfs"
	"github.com/dlbundle/dlbundle/internal/slowfs/slowfstest"
)

// serveEnv makes the test binary a bare slowfs server (see TestMain), so that
// a test can kill a server and check what it leaves behind.
const serveEnv = "SLOWFS_TEST_SERVE"

func TestMain(m *testing.M) {
	if arg := os.Getenv(serveEnv); arg != "" {
		src, mnt, _ := strings.Cut(arg, "\n")
		if _, err := slowfs.Mount(src, mnt, slowfs.Costs{}); err != nil {
			os.Stdout.WriteString("error: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Stdout.WriteString("mounted\n")
		select {} // serve until killed
	}
	os.Exit(m.Run())
}

// tree builds a small source tree: a 3 MiB file, a directory of three files,
// a symlink.
func tree(t *testing.T) (src string, size int) {
	src = t.TempDir()
	size = 3<<20 + 123
	data := bytes.Repeat([]byte("slowfs"), size/6+1)[:size]
	must(t, os.WriteFile(filepath.Join(src, "a"), data, 0o644))
	must(t, os.Mkdir(filepath.Join(src, "d"), 0o755))
	for _, n := range []string{"x", "y", "z"} {
		must(t, os.WriteFile(filepath.Join(src, "d", n), []byte(n), 0o644))
	}
	must(t, os.Symlink("a", filepath.Join(src, "l")))
	return src, size
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestCountsAreExactForKnownOperations(t *testing.T) {
	src, size := tree(t)
	mnt := t.TempDir()
	f := slowfstest.Mount(t, src, mnt, slowfs.Costs{})

	// Each step starts from zero counts and lists what it must have cost.
	steps := []struct {
		name string
		do   func() error
		want func(s slowfs.Stats) bool
	}{
		{"five stats of a missing name: one negative lookup each, nothing else", func() error {
			for i := 0; i < 5; i++ {
				if _, err := os.Stat(filepath.Join(mnt, "missing")); !errors.Is(err, os.ErrNotExist) {
					return err
				}
			}
			return nil
		}, func(s slowfs.Stats) bool { return s.Lookup == 5 && s.MetadataOps() == 5 && s.Read == 0 }},
		{"stat d/x: one lookup per path component and a getattr", func() error {
			_, err := os.Stat(filepath.Join(mnt, "d", "x"))
			return err
		}, func(s slowfs.Stats) bool { return s.Lookup == 2 && s.Getattr >= 1 && s.Open == 0 }},
		{"readlink l: one lookup, one readlink", func() error {
			target, err := os.Readlink(filepath.Join(mnt, "l"))
			if err == nil && target != "a" {
				err = errors.New("readlink returned " + target)
			}
			return err
		}, func(s slowfs.Stats) bool { return s.Lookup == 1 && s.Readlink == 1 && s.Open == 0 }},
		{"list d: one opendir, readdir requests, no opens", func() error {
			ents, err := os.ReadDir(filepath.Join(mnt, "d"))
			if err == nil && len(ents) != 3 {
				err = errors.New("listing of d is incomplete")
			}
			return err
		}, func(s slowfs.Stats) bool { return s.Opendir == 1 && s.Readdir >= 1 && s.Open == 0 && s.Read == 0 }},
		{"read a twice: two opens, every byte read from the source both times (no kernel cache)", func() error {
			for i := 0; i < 2; i++ {
				got, err := os.ReadFile(filepath.Join(mnt, "a"))
				if err != nil {
					return err
				}
				if len(got) != size {
					return errors.New("short read")
				}
			}
			return nil
		}, func(s slowfs.Stats) bool { return s.Open == 2 && s.BytesRead == uint64(2*size) && s.Opendir == 0 }},
	}
	for _, st := range steps {
		f.Reset()
		if s := f.Stats(); s.MetadataOps() != 0 || s.BytesRead != 0 {
			t.Fatalf("Reset left counts behind: %v", s)
		}
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if s := f.Stats(); !st.want(s) {
			t.Errorf("%s: got %v", st.name, s)
		}
	}
}

func TestMetadataOperationsQueueOnOneServer(t *testing.T) {
	src, _ := tree(t)
	mnt := t.TempDir()
	const service = 2 * time.Millisecond
	f := slowfstest.Mount(t, src, mnt, slowfs.Costs{Metadata: service})
	f.Reset()

	// 8 concurrent clients x 5 negative lookups: on one queue that is at least
	// 40 service times end to end, not 5 as with independent servers.
	const clients, each = 8, 5
	start := time.Now()
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				_, _ = os.Stat(filepath.Join(mnt, "missing"))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	s := f.Stats()
	if s.Lookup != clients*each {
		t.Fatalf("lookups = %d, want %d", s.Lookup, clients*each)
	}
	if min := clients * each * service; elapsed < min {
		t.Errorf("%d queued lookups took %v, want at least %v", s.Lookup, elapsed, min)
	}
	if s.MetaBusy != clients*each*service {
		t.Errorf("metadata server busy %v, want %v", s.MetaBusy, clients*each*service)
	}
}

func TestDataReadsCostPerMiB(t *testing.T) {
	src, size := tree(t)
	mnt := t.TempDir()
	const perMiB = 40 * time.Millisecond
	slowfstest.Mount(t, src, mnt, slowfs.Costs{ReadPerMiB: perMiB})
	start := time.Now()
	if _, err := os.ReadFile(filepath.Join(mnt, "a")); err != nil {
		t.Fatal(err)
	}
	if min := time.Duration(size>>20) * perMiB; time.Since(start) < min {
		t.Errorf("reading %d bytes took %v, want at least %v", size, time.Since(start), min)
	}
}

func TestControlSocketReadsAndResetsCounts(t *testing.T) {
	src, _ := tree(t)
	mnt := t.TempDir()
	f := slowfstest.Mount(t, src, mnt, slowfs.Costs{})
	sock := filepath.Join(t.TempDir(), "ctl")
	l, err := f.ServeControl(sock)
	must(t, err)
	t.Cleanup(func() { l.Close() })

	f.Reset()
	for i := 0; i < 3; i++ {
		_, _ = os.Stat(filepath.Join(mnt, "nope"))
	}
	s, err := slowfs.QueryControl(sock, "stats")
	must(t, err)
	if s.Lookup != 3 {
		t.Errorf("stats over the socket: lookups = %d, want 3", s.Lookup)
	}
	s, err = slowfs.QueryControl(sock, "reset")
	must(t, err)
	if s.Lookup != 3 {
		t.Errorf("reset reply: lookups = %d, want the 3 before the reset", s.Lookup)
	}
	if s := f.Stats(); s.MetadataOps() != 0 {
		t.Errorf("after reset over the socket: %v", s)
	}
	if _, err := slowfs.QueryControl(sock, "bogus"); err == nil {
		t.Error("an unknown command was accepted")
	}
}

func TestCleanupUnmountsAfterTheTest(t *testing.T) {
	src, _ := tree(t)
	mnt := t.TempDir()
	t.Run("mounting", func(t *testing.T) {
		slowfstest.Mount(t, src, mnt, slowfs.Costs{})
		if !slowfs.Mounted(mnt) {
			t.Fatal("not mounted")
		}
	})
	if slowfs.Mounted(mnt) {
		t.Error("mount left behind after the subtest ended")
		_ = slowfs.ForceUnmount(mnt)
	}
}

func TestForceUnmountClearsAKilledServersMount(t *testing.T) {
	src, _ := tree(t)
	mnt := t.TempDir()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), serveEnv+"="+src+"\n"+mnt)
	out, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = slowfs.ForceUnmount(mnt)
	})
	line, _ := bufio.NewReader(out).ReadString('\n')
	switch {
	case bytes.Contains([]byte(line), []byte(slowfs.ErrNotPermitted.Error())):
		t.Skipf("skipping: this test needs a FUSE mount: %s", line)
	case line != "mounted\n":
		t.Fatalf("server: %q", line)
	}
	must(t, cmd.Process.Kill())
	_ = cmd.Wait()
	if !slowfs.Mounted(mnt) {
		t.Fatal("the killed server's mount is already gone; this test no longer tests anything")
	}
	must(t, slowfs.ForceUnmount(mnt))
	if slowfs.Mounted(mnt) {
		t.Error("stale mount left behind")
	}
	must(t, slowfs.ForceUnmount(mnt)) // and it is a no-op now
}

func TestTopPathsNamesWhatWasLookedUp(t *testing.T) {
	src, _ := tree(t)
	mnt := t.TempDir()
	f := slowfstest.Mount(t, src, mnt, slowfs.Costs{})
	f.RecordPaths(true)
	f.Reset()
	for i := 0; i < 3; i++ {
		_, _ = os.Stat(filepath.Join(mnt, "missing"))
	}
	if _, err := os.Readlink(filepath.Join(mnt, "l")); err != nil {
		t.Fatal(err)
	}
	top := f.TopPaths(10)
	if len(top) != 2 || top[0] != (slowfs.PathCount{Path: "/missing", Count: 3}) || top[1] != (slowfs.PathCount{Path: "/l", Count: 2}) {
		t.Errorf("top paths = %+v, want /missing x3 (lookups), /l x2 (lookup, readlink)", top)
	}
	f.Reset()
	if top := f.TopPaths(10); len(top) != 0 {
		t.Errorf("after Reset: %+v", top)
	}
}

// failDirEnv makes TestHelperFailsWhileMounted mount there and fail.
const failDirEnv = "SLOWFS_TEST_FAIL_MOUNTPOINT"

// TestHelperFailsWhileMounted is run only as a child of
// TestUnmountedEvenWhenATestFails.
func TestHelperFailsWhileMounted(t *testing.T) {
	mnt := os.Getenv(failDirEnv)
	if mnt == "" {
		return // not a child run: nothing to do
	}
	src := t.TempDir()
	slowfstest.Mount(t, src, mnt, slowfs.Costs{})
	t.Fatal("failing on purpose while mounted")
}

func TestUnmountedEvenWhenATestFails(t *testing.T) {
	mnt := t.TempDir()
	skipWithoutFUSE(t)
	cmd := exec.Command(os.Args[0], "-test.run", "^TestHelperFailsWhileMounted$", "-test.count=1")
	cmd.Env = append(os.Environ(), failDirEnv+"="+mnt)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "failing on purpose while mounted") {
		t.Fatalf("the child test did not fail as planned: %v\n%s", err, out)
	}
	if slowfs.Mounted(mnt) {
		_ = slowfs.ForceUnmount(mnt)
		t.Errorf("a failed test left its mount at %s behind", mnt)
	}
}

// skipWithoutFUSE skips (the only acceptable skip) where FUSE cannot be mounted.
func skipWithoutFUSE(t *testing.T) {
	t.Helper()
	slowfstest.Mount(t, t.TempDir(), t.TempDir(), slowfs.Costs{})
}

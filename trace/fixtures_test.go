package trace

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestFileOps traces a C program making each kind of lookup and change, with
// relative paths against the cwd and a dirfd, and checks every record.
func TestFileOps(t *testing.T) {
	exe := fixture(t, "files")
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "data.txt"), []byte("hello"), 0o644)
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "sub", "a"), nil, 0o644)
	os.Mkdir(filepath.Join(dir, "sub", "d"), 0o755)
	os.Symlink("../data.txt", filepath.Join(dir, "sub", "l"))
	os.Symlink("data.txt", filepath.Join(dir, "link"))

	tr, res := traceRun(t, exe, dir)
	if res.Exit != 0 {
		t.Fatalf("fixture exited %d", res.Exit)
	}
	mustFind(t, tr, OpExec, exe, "")
	mustFind(t, tr, OpChdir, dir, "")
	data := filepath.Join(dir, "data.txt")
	opens := find(tr, OpOpen, data)
	if len(opens) != 2 { // once relative to the cwd, once through ../ from sub/
		t.Fatalf("want 2 opens of %s, got %d:\n%s", data, len(opens), dump(tr))
	}
	for _, e := range opens {
		if e.Err != "" || e.FD == nil || e.Size == nil || *e.Size != 5 || e.MtimeNS == nil || e.Dir {
			t.Errorf("open record %+v: want fd, size 5, mtime", e)
		}
	}
	fi, _ := os.Stat(data)
	if *opens[0].MtimeNS != fi.ModTime().UnixNano() {
		t.Errorf("mtime_ns %d, file has %d", *opens[0].MtimeNS, fi.ModTime().UnixNano())
	}
	mustFind(t, tr, OpStat, filepath.Join(dir, "missing-1.txt"), "ENOENT")
	mustFind(t, tr, OpStat, filepath.Join(dir, "data.txt/not-a-dir"), "ENOTDIR")
	if e := mustFind(t, tr, OpStat, filepath.Join(dir, "link"), ""); e.Flags&0x100 == 0 {
		t.Errorf("lstat record lacks AT_SYMLINK_NOFOLLOW: %+v", e)
	}
	mustFind(t, tr, OpAccess, filepath.Join(dir, "missing-2.txt"), "ENOENT")
	if e := mustFind(t, tr, OpReadlink, filepath.Join(dir, "link"), ""); e.Path2 != "data.txt" {
		t.Errorf("readlink path2 %q, want data.txt", e.Path2)
	}
	if e := mustFind(t, tr, OpOpen, filepath.Join(dir, "sub"), ""); !e.Dir {
		t.Errorf("directory open not marked dir: %+v", e)
	}
	ls := mustFind(t, tr, OpListdir, filepath.Join(dir, "sub"), "")
	var names []string
	for _, e := range ls.Entries {
		names = append(names, e.Name+":"+e.Type)
	}
	sort.Strings(names)
	if got := strings.Join(names, " "); got != "a:reg d:dir l:symlink" {
		t.Errorf("listing of sub: %q", got)
	}
	// fstat(dfd) goes through newfstatat(fd, "", AT_EMPTY_PATH): not a lookup.
	for _, e := range tr.Events {
		if e.Op == OpStat && e.Path == filepath.Join(dir, "sub") {
			t.Errorf("fd-based fstat recorded as a lookup: %+v", e)
		}
	}
	nd := filepath.Join(dir, "newdir")
	mustFind(t, tr, OpMkdir, nd, "")
	if w := mustFind(t, tr, OpOpen, nd+"/out.txt", ""); !w.Writes() || w.Size != nil {
		t.Errorf("write open %+v: want Writes() and no size", w)
	}
	if r := mustFind(t, tr, OpRename, nd+"/out.txt", ""); r.Path2 != nd+"/out2.txt" {
		t.Errorf("rename path2 %q", r.Path2)
	}
	if s := mustFind(t, tr, OpSymlink, nd+"/sym", ""); s.Path2 != "out2.txt" {
		t.Errorf("symlink target %q", s.Path2)
	}
	mustFind(t, tr, OpUnlink, nd+"/sym", "")
	mustFind(t, tr, OpRmdir, nd, "")
	mustFind(t, tr, OpChdir, filepath.Join(dir, "sub"), "")
	mustFind(t, tr, OpStat, filepath.Join(dir, "sub", "missing-3.txt"), "ENOENT")
	// Order and time: events are in the order the calls completed.
	for i := 1; i < len(tr.Events); i++ {
		if tr.Events[i].T < tr.Events[i-1].T {
			t.Fatalf("event %d goes back in time", i)
		}
	}
}

// TestDlopenRunpathOrigin: the library search of ld.so through RUNPATH and
// $ORIGIN shows up as the opens of the libraries it found.
func TestDlopenRunpathOrigin(t *testing.T) {
	exe, lib := pluginFixture(t)
	tr, res := traceRun(t, exe)
	if res.Exit != 0 {
		t.Fatalf("plugin_main exited %d (dlopen failed?)", res.Exit)
	}
	for _, so := range []string{"libplug.so", "libdep.so"} {
		e := mustFind(t, tr, OpOpen, filepath.Join(lib, so), "")
		fi, _ := os.Stat(filepath.Join(lib, so))
		if e.Size == nil || *e.Size != fi.Size() {
			t.Errorf("%s: size %v, want %d", so, e.Size, fi.Size())
		}
	}
}

// TestThreads: calls of every thread are recorded under the thread's id.
func TestThreads(t *testing.T) {
	exe := fixture(t, "threads")
	dir := t.TempDir()
	const n = 8
	for i := 0; i < n; i++ {
		os.WriteFile(filepath.Join(dir, "t"+strconv.Itoa(i)+".txt"), nil, 0o644)
	}
	tr, _ := traceRun(t, exe, dir, strconv.Itoa(n))
	main := mustFind(t, tr, OpExec, exe, "").PID
	tids := map[int]bool{}
	for i := 0; i < n; i++ {
		e := mustFind(t, tr, OpOpen, filepath.Join(dir, "t"+strconv.Itoa(i)+".txt"), "")
		if e.PID == main {
			t.Errorf("open in thread %d recorded under the main thread", i)
		}
		tids[e.PID] = true
	}
	if len(tids) != n {
		t.Errorf("%d distinct thread ids for %d threads", len(tids), n)
	}
	spawns := 0
	for _, e := range tr.Events {
		if e.Op == OpSpawn && e.PID == main && e.FD != nil && tids[*e.FD] {
			spawns++
		}
	}
	if spawns != n {
		t.Errorf("%d spawn records of the threads, want %d", spawns, n)
	}
}

// TestExecFromThread: an exec by a thread other than the main one is
// recorded under the process id, which the exec'd program keeps.
func TestExecFromThread(t *testing.T) {
	exe := fixture(t, "thread_exec")
	tr, res := traceRun(t, exe)
	if res.Exit != 0 {
		t.Fatalf("exit %d", res.Exit)
	}
	main := mustFind(t, tr, OpExec, exe, "").PID
	var thread int
	for _, e := range tr.Events {
		if e.Op == OpSpawn && e.PID == main {
			thread = *e.FD
		}
	}
	if thread == 0 || thread == main {
		t.Fatalf("no thread spawn record:\n%s", dump(tr))
	}
	if e := mustFind(t, tr, OpExec, "/bin/true", ""); e.PID != main {
		t.Errorf("exec by thread %d recorded under %d, want the process id %d", thread, e.PID, main)
	}
	for _, e := range tr.Events {
		if e.Path == "/lib/x86_64-linux-gnu/libc.so.6" && e.PID != main {
			t.Errorf("after the exec, lookups under %d, want %d", e.PID, main)
		}
	}
}

// TestStubExecFromThread: when the stub's execve runs on one of its other
// threads, the app is still recognised (exec under the main pid, its
// children recorded).
func TestStubExecFromThread(t *testing.T) {
	out := filepath.Join(t.TempDir(), "x.trace")
	self, _ := os.Executable()
	res, err := Run(Options{Command: []string{"/bin/sh", "-c", "/bin/true; /bin/true"}, Output: out, Quiet: true,
		Stub: []string{self, "__trace-stub-thread", "--"}})
	if err != nil || res.Exit != 0 {
		t.Fatalf("%v, exit %v", err, res)
	}
	f, _ := os.Open(out)
	defer f.Close()
	tr, err := Read(f, out)
	if err != nil {
		t.Fatal(err)
	}
	sh := mustFind(t, tr, OpExec, "/bin/sh", "")
	spawns := 0
	for _, e := range tr.Events {
		if e.Op == OpSpawn && e.PID == sh.PID {
			spawns++
		}
	}
	if spawns != 2 { // dash forks for both commands
		t.Errorf("%d spawn records from the shell %d, want 2:\n%s", spawns, sh.PID, dump(tr))
	}
}

// TestForkExecAndPosixSpawn: children made by fork and by posix_spawn (a
// CLONE_VFORK clone) are followed through their exec.
func TestForkExecAndPosixSpawn(t *testing.T) {
	exe := fixture(t, "spawn")
	file := filepath.Join(t.TempDir(), "payload.txt")
	os.WriteFile(file, []byte("payload\n"), 0o644)
	for mode, sc := range map[string]string{"fork": "fork", "posix": "vfork"} {
		t.Run(mode, func(t *testing.T) {
			tr, res := traceRun(t, exe, mode, file)
			if res.Exit != 0 {
				t.Fatalf("exit %d", res.Exit)
			}
			parent := mustFind(t, tr, OpExec, exe, "").PID
			var child int
			for _, e := range tr.Events {
				if e.Op == OpSpawn && e.PID == parent && e.Syscall == sc {
					child = *e.FD
				}
			}
			if child == 0 {
				t.Fatalf("no %s spawn record from %d:\n%s", sc, parent, dump(tr))
			}
			if e := mustFind(t, tr, OpExec, "/bin/cat", ""); e.PID != child {
				t.Errorf("exec of cat by %d, want the child %d", e.PID, child)
			}
			if e := mustFind(t, tr, OpOpen, file, ""); e.PID != child {
				t.Errorf("open of the payload by %d, want the child %d", e.PID, child)
			}
		})
	}
}

// TestShellDash: /bin/sh (dash on Debian) runs commands found in PATH; its
// PATH probes, the exec and the child's lookups are all there.
func TestShellDash(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644)
	t.Setenv("PATH", "/nonexistent-bin:/usr/bin:/bin")
	tr, res := traceRun(t, "/bin/sh", "-c", "cat "+dir+"/f >/dev/null; ls "+dir+" >/dev/null; exit 7")
	if res.Exit != 7 {
		t.Fatalf("exit %d, want 7 (the shell's)", res.Exit)
	}
	mustFind(t, tr, OpStat, "/nonexistent-bin/cat", "ENOENT")
	mustFind(t, tr, OpExec, "/usr/bin/cat", "")
	mustFind(t, tr, OpOpen, dir+"/f", "")
	if ls := mustFind(t, tr, OpListdir, dir, ""); len(ls.Entries) != 1 || ls.Entries[0].Name != "f" {
		t.Errorf("listing of %s: %+v", dir, ls.Entries)
	}
}

// TestNoFdsLeakToTheApp: the app starts with stdin, stdout and stderr only
// (no trace file, pidfd or pipe of dlbundle), read from the trace's own
// listing of /proc/PID/fd (one more fd is ls's handle on that directory).
func TestNoFdsLeakToTheApp(t *testing.T) {
	tr, _ := traceRun(t, "/bin/sh", "-c", "exec /bin/ls /proc/self/fd >/dev/null")
	ls := mustFind(t, tr, OpExec, "/bin/ls", "")
	l := mustFind(t, tr, OpListdir, "/proc/"+strconv.Itoa(ls.PID)+"/fd", "")
	var fds []string
	for _, e := range l.Entries {
		fds = append(fds, e.Name)
	}
	sort.Strings(fds)
	// Plus what this test process inherited without close-on-exec (any
	// child gets those; flock(1) around make test passes its lock as fd 3),
	// and ls's handle, at the lowest fd number left free.
	want := []string{"0", "1", "2"}
	inherited := map[int]bool{}
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		fd, _ := strconv.Atoi(e.Name())
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); fd > 2 && err == nil && flags&unix.FD_CLOEXEC == 0 {
			want = append(want, e.Name())
			inherited[fd] = true
		}
	}
	handle := 3
	for inherited[handle] {
		handle++
	}
	want = append(want, strconv.Itoa(handle))
	sort.Strings(want)
	if strings.Join(fds, " ") != strings.Join(want, " ") {
		t.Errorf("fds open in the app: %v, want %v", fds, want)
	}
}

// TestDaemonDoesNotHang: a child that outlives the app is detached and left
// running, not stopped, not traced, and the trace is complete.
func TestDaemonDoesNotHang(t *testing.T) {
	exe := fixture(t, "daemon")
	pidfile := filepath.Join(t.TempDir(), "daemon.pid")
	var warnings strings.Builder
	res, err := Run(Options{Command: []string{exe, "30", pidfile}, Output: filepath.Join(t.TempDir(), "d.trace"),
		Quiet: true, Stderr: &warnings})
	if err != nil || res.Exit != 0 {
		t.Fatalf("%v, result %+v", err, res)
	}
	b, err := os.ReadFile(pidfile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	defer syscall.Kill(pid, syscall.SIGKILL)
	// The user is told which process was left and what that means for it.
	// (by its program, and with what to do: stop it, fold a run's report in)
	if w := warnings.String(); !strings.Contains(w, "outlived the app") || !strings.Contains(w, strconv.Itoa(pid)) ||
		!strings.Contains(w, "ENOSYS") || !strings.Contains(w, strconv.Itoa(pid)+" ("+exe+")") || !strings.Contains(w, "build --from") {
		t.Errorf("warning about the survivor: %q", w)
	}
	// Right after the detach it may still be on its way into sleep().
	var status []byte
	for i := 0; i < 100; i++ {
		if status, err = os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status"); err != nil {
			t.Fatalf("daemon %d is gone: %v", pid, err)
		}
		if strings.Contains(string(status), "S (sleeping)") {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "TracerPid:") && strings.TrimSpace(line[10:]) != "0" {
			t.Errorf("daemon still traced: %s", line)
		}
		if strings.HasPrefix(line, "State:") && !strings.Contains(line, "S (sleeping)") {
			t.Errorf("daemon not sleeping: %s", line)
		}
	}
	// It was detached, not killed: it can still be signalled and reaped by init.
	if err := syscall.Kill(pid, 0); err != nil {
		t.Errorf("daemon: %v", err)
	}
}

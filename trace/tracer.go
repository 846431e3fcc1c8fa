package trace

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ptraceOptions: stop at seccomp RET_TRACE, follow every new task, report exec,
// mark syscall stops (SIGTRAP|0x80), and kill the tracees if the tracer dies
// (a tracee whose filter has no tracer gets ENOSYS for every file call).
const ptraceOptions = unix.PTRACE_O_TRACESECCOMP | unix.PTRACE_O_TRACEFORK | unix.PTRACE_O_TRACEVFORK |
	unix.PTRACE_O_TRACECLONE | unix.PTRACE_O_TRACEEXEC | unix.PTRACE_O_TRACESYSGOOD | unix.PTRACE_O_EXITKILL

const (
	atFDCWD     = -100
	atEmptyPath = 0x1000
	atRemoveDir = 0x200
)

// task is one traced thread.
type task struct {
	tgid     int          // thread group (process) id; 0 until needed
	attached bool         // its first stop has been seen
	pending  *pendingCall // a filtered call between entry and exit
}

// pendingCall is a filtered system call seen at entry, completed at exit.
type pendingCall struct {
	spec *scSpec
	args [6]uint64
	ev   Event
	dir  dirKey // getdents64: the directory being read
	// The path as the tracee passed it and its directory fd, for predict.
	raw      string
	rawDirfd int
}

// dirKey identifies a directory being listed: fds belong to processes.
type dirKey struct{ tgid, fd int }

// listing accumulates getdents64 results until the directory's end.
type listing struct {
	path    string
	entries []DirEntry
	broken  bool // a buffer did not parse: never emit a partial listing
}

// tracer holds the state of one pilot run. All its methods run on one locked
// OS thread: ptrace requests are only accepted from the tracing thread.
type tracer struct {
	start      time.Time
	rec        *recorder
	mainPid    int
	appStarted bool // the stub has exec'd the app; earlier spawns are the stub's own threads
	tasks      map[int]*task
	listings   map[dirKey]*listing
	sigSeen    *signalLog
	fatal      error // the run cannot be traced; the app has been killed
	// exact: follow every filtered call to its exit (no prediction), set by
	// Options.NoPredict or once a tracee may no longer see the file system
	// as the tracer does (see predict.go).
	exact     bool
	self      string // the tracer's own credentials and namespaces (taskContext)
	predicted int64  // calls answered at entry
	// inject: the filter to install at the app's first stop (no stub);
	// appPath is what was exec'd, for its exec record.
	inject  []unix.SockFilter
	appPath string
	// page and scratch are reused buffers for reading the tracee's memory
	// (path strings; readlink results and getdents64 buffers).
	page    [pageSize]byte
	scratch []byte
	spare   *pendingCall // a finished call's record, reused by the next one
}

// scratchBuf returns a reused buffer of n bytes.
func (t *tracer) scratchBuf(n int) []byte {
	if cap(t.scratch) < n {
		t.scratch = make([]byte, n)
	}
	return t.scratch[:n]
}

// loop waits for tracee stops until the main process exits, and returns its
// exit status (128+N when killed by signal N).
func (t *tracer) loop() (int, error) {
	for {
		var ws unix.WaitStatus
		pid, err := rawWait4(&ws)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("waiting for the traced app: %w", err)
		}
		switch {
		case ws.Exited(), ws.Signaled():
			delete(t.tasks, pid)
			if pid == t.mainPid {
				if t.fatal != nil {
					return 0, t.fatal
				}
				if ws.Exited() {
					return ws.ExitStatus(), nil
				}
				return 128 + int(ws.Signal()), nil
			}
		case ws.Stopped():
			t.onStop(pid, ws)
		}
	}
}

func (t *tracer) task(tid int) *task {
	tk := t.tasks[tid]
	if tk == nil {
		tk = &task{}
		t.tasks[tid] = tk
	}
	return tk
}

func (t *tracer) onStop(tid int, ws unix.WaitStatus) {
	tk := t.task(tid)
	firstStop := !tk.attached
	tk.attached = true
	sig := ws.StopSignal()
	switch {
	case sig == unix.SIGTRAP|0x80:
		t.onSyscallExit(tid, tk)
		return
	case sig == unix.SIGTRAP:
		switch ev := int(ws) >> 16; ev {
		case unix.PTRACE_EVENT_SECCOMP:
			t.onSeccomp(tid, tk)
			return
		case unix.PTRACE_EVENT_FORK, unix.PTRACE_EVENT_VFORK, unix.PTRACE_EVENT_CLONE:
			t.onSpawn(tid, ev)
			resume(tid, 0)
			return
		case unix.PTRACE_EVENT_EXEC:
			t.onExec(tid)
			resume(tid, 0)
			return
		case 0:
			if tid == t.mainPid && firstStop {
				// The exec after PTRACE_TRACEME (of the stub, or of the app
				// itself): set our options now.
				if err := unix.PtraceSetOptions(tid, ptraceOptions); err != nil {
					// Without them every filtered call would fail with ENOSYS.
					t.fatal = fmt.Errorf("setting ptrace options (seccomp stops need Linux >= 4.8): %v", err)
					_ = unix.Kill(tid, unix.SIGKILL)
				}
				if t.inject != nil && t.fatal == nil {
					t.startApp(tid)
					return
				}
				resume(tid, 0)
				return
			}
		}
	case sig == unix.SIGSTOP && firstStop:
		// A new task auto-attached by TRACEFORK/VFORK/CLONE starts with SIGSTOP.
		resume(tid, 0)
		return
	}
	// A signal on its way to the tracee: pass it on.
	if isStopSignal(sig) && inGroupStop(tid) {
		// Without PTRACE_SEIZE a group-stop cannot be kept up while traced;
		// resume (job-control stops are not honoured during the pilot).
		resume(tid, 0)
		return
	}
	t.sigSeen.saw(sig)
	resume(tid, int(sig))
}

// startApp installs the filter in the app, stopped at its first
// instruction, and records its exec as the stub's execve would have been.
func (t *tracer) startApp(tid int) {
	pending, err := injectFilter(tid, t.inject)
	if err != nil {
		t.fatal = fmt.Errorf("dlbundle trace: %v", err)
		_ = unix.Kill(tid, unix.SIGKILL)
		resume(tid, 0)
		return
	}
	t.appStarted = true
	t.rec.emit(&Event{PID: tid, Op: OpExec, Syscall: "execve", Path: resolve(tid, atFDCWD, t.appPath)}, t.start)
	t.checkContext(tid)
	sig := 0
	for _, s := range pending {
		sig = int(s) // at most one can be passed on resuming; the last is the most recent
	}
	resume(tid, sig)
}

func resume(tid, sig int) {
	// ESRCH: the task died meanwhile; its exit is reported by wait4.
	_ = unix.PtraceCont(tid, sig)
}

func isStopSignal(s syscall.Signal) bool {
	return s == unix.SIGSTOP || s == unix.SIGTSTP || s == unix.SIGTTIN || s == unix.SIGTTOU
}

// inGroupStop tells a group-stop from a signal-delivery-stop: only the latter
// has siginfo (PTRACE_GETSIGINFO fails with EINVAL in a group-stop).
func inGroupStop(tid int) bool {
	var info [128]byte
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_GETSIGINFO, uintptr(tid), 0, uintptr(unsafe.Pointer(&info[0])), 0, 0)
	return e == unix.EINVAL
}

func (t *tracer) onSpawn(tid, event int) {
	msg, err := unix.PtraceGetEventMsg(tid)
	if err != nil {
		return
	}
	child := int(msg)
	ck := t.task(child)
	isProcess := event != unix.PTRACE_EVENT_CLONE
	if isProcess {
		ck.tgid = child
	} else if ck.tgid = readTgid(child); ck.tgid == child {
		isProcess = true // clone() without CLONE_THREAD
	}
	if !t.appStarted {
		return
	}
	t.checkContext(child) // clone() with new namespaces
	if isProcess {
		t.rec.stats.processes++
	}
	t.rec.emit(&Event{PID: tid, Op: OpSpawn, Syscall: spawnName(event), FD: &child}, t.start)
}

func spawnName(event int) string {
	switch event {
	case unix.PTRACE_EVENT_FORK:
		return "fork"
	case unix.PTRACE_EVENT_VFORK:
		return "vfork"
	}
	return "clone"
}

// onExec completes a successful execve. The kernel reports it under the
// process id even when another thread called it; that thread's id is in the
// event message.
func (t *tracer) onExec(tid int) {
	if msg, err := unix.PtraceGetEventMsg(tid); err == nil && int(msg) != tid {
		if old := t.tasks[int(msg)]; old != nil {
			t.task(tid).pending = old.pending
			delete(t.tasks, int(msg))
		}
	}
	tk := t.task(tid)
	tk.tgid = tid
	t.checkContext(tid) // e.g. a set-user-ID program
	if tid == t.mainPid {
		// The stub became the app (whichever of its threads called execve;
		// the process keeps the main pid): spawns from now on are the app's.
		t.appStarted = true
	}
	if p := tk.pending; p != nil && p.spec.op == OpExec {
		tk.pending = nil
		p.ev.PID = tid // the caller now has the process's id: record the one that lives on
		t.rec.emit(&p.ev, t.start)
	}
	for k := range t.listings { // close-on-exec fds are gone
		if k.tgid == tid {
			delete(t.listings, k)
		}
	}
}

// onSeccomp handles the entry of a filtered call: decode its arguments now
// (an exec replaces the memory they point to), then catch its exit.
func (t *tracer) onSeccomp(tid int, tk *task) {
	var r regs
	if err := getRegs(tid, &r); err != nil {
		resume(tid, 0)
		return
	}
	nr, args := r.syscall()
	spec, ok := specs()[nr]
	if !ok {
		if contextCalls[nr] {
			t.exact = true // credentials, root or namespaces may change: stop predicting
		}
		resume(tid, 0)
		return
	}
	p := t.decodeEntry(tid, spec, args)
	if p == nil {
		resume(tid, 0)
		return
	}
	if !t.exact && t.predict(tid, p) {
		// The outcome is known: emit now and let the call run without an exit stop.
		t.predicted++
		t.rec.emit(&p.ev, t.start)
		t.spare = p
		resume(tid, 0)
		return
	}
	tk.pending = p
	if err := unix.PtraceSyscall(tid, 0); err != nil {
		tk.pending = nil
	}
}

func (t *tracer) onSyscallExit(tid int, tk *task) {
	p := tk.pending
	tk.pending = nil
	if p != nil {
		var r regs
		if err := getRegs(tid, &r); err == nil {
			t.decodeExit(tid, p, r.result())
		}
		t.spare = p // written out, or dropped
	}
	resume(tid, 0)
}

// specs is syscallTable by pointer: a pending call keeps its entry's
// address, and a copy taken at every stop escaped to the heap (a 128-byte
// allocation per traced call, a third of what the tracer allocated).
var specs = sync.OnceValue(func() map[uint64]*scSpec {
	m := make(map[uint64]*scSpec, len(syscallTable))
	for nr, s := range syscallTable {
		m[nr] = &s
	}
	return m
})

// decodeEntry builds the event of a call from its arguments. It returns nil
// for calls that are not lookups (fstat through newfstatat(fd, "", AT_EMPTY_PATH)).
func (t *tracer) decodeEntry(tid int, spec *scSpec, args [6]uint64) *pendingCall {
	p := t.spare
	if p == nil {
		p = &pendingCall{}
	}
	t.spare = nil
	*p = pendingCall{spec: spec, args: args}
	ev := &p.ev
	ev.PID, ev.Op, ev.Syscall = tid, spec.op, spec.name
	if spec.flags != argNone {
		ev.Flags = int(int32(spec.flags.of(args)))
	}
	ev.Flags |= spec.fixedFlags
	if spec.howArg != argNone {
		var how [8]byte
		if _, err := readMem(tid, spec.howArg.of(args), how[:]); err == nil {
			ev.Flags = int(int32(*(*uint64)(unsafe.Pointer(&how[0]))))
		}
	}
	if spec.op == OpUnlink && ev.Flags&atRemoveDir != 0 {
		ev.Op = OpRmdir
	}
	if spec.path != argNone {
		addr := spec.path.of(args)
		var s string
		if addr != 0 {
			var err error
			if s, err = readString(tid, addr, t.page[:]); err != nil {
				return nil // the call fails with EFAULT: no lookup happens
			}
		}
		dirfd := atFDCWD
		if spec.dirfd != argNone {
			dirfd = int(int32(spec.dirfd.of(args)))
		}
		p.raw, p.rawDirfd = s, dirfd
		if s == "" {
			// fd-based forms: fstatat(fd, "", AT_EMPTY_PATH), futimens, execveat(fd, "").
			if spec.op == OpStat || (addr != 0 && ev.Flags&atEmptyPath == 0) {
				return nil
			}
			ev.Path = fdPath(tid, dirfd)
		} else {
			ev.Path = resolve(tid, dirfd, s)
		}
	}
	if spec.path2 != argNone {
		if s, err := readString(tid, spec.path2.of(args), t.page[:]); err == nil {
			dirfd := atFDCWD
			if spec.dirfd2 != argNone {
				dirfd = int(int32(spec.dirfd2.of(args)))
			}
			ev.Path2 = resolve(tid, dirfd, s)
		}
	}
	if spec.rawPath2 != argNone {
		ev.Path2, _ = readString(tid, spec.rawPath2.of(args), t.page[:])
	}
	if spec.fdArg != argNone {
		fd := int(int32(spec.fdArg.of(args)))
		switch spec.op {
		case OpChdir:
			ev.Path = fdPath(tid, fd)
		case OpListdir:
			p.dir = dirKey{t.tgidOf(tid), fd}
			if t.listings[p.dir] == nil {
				t.listings[p.dir] = &listing{path: fdPath(tid, fd)}
			}
		}
	}
	return p
}

// Kernel-internal "restart the call" results, seen by a tracer when a signal
// interrupts a call; the call is entered again afterwards.
func isRestart(res int64) bool { return res <= -512 && res >= -516 }

// decodeExit completes the event with the call's result and emits it.
func (t *tracer) decodeExit(tid int, p *pendingCall, res int64) {
	if isRestart(res) {
		return
	}
	ev := &p.ev
	if res < 0 && res > -4096 {
		ev.Err = errnoName(syscall.Errno(-res))
	}
	switch ev.Op {
	case OpOpen:
		if ev.Err == "" {
			fd := int(res)
			ev.FD = &fd
			t.describeOpened(tid, ev, fd)
		}
	case OpReadlink:
		if ev.Err == "" && res > 0 {
			buf := t.scratchBuf(int(res))
			if n, err := readMem(tid, p.spec.outBuf.of(p.args), buf); err == nil {
				ev.Path2 = string(buf[:n])
			}
		}
	case OpListdir:
		t.collectListing(tid, p, res)
		return
	}
	t.rec.emit(ev, t.start)
}

// describeOpened adds what build needs about an opened object: directory or
// not, and for a file read its size and mtime (to detect later changes).
func (t *tracer) describeOpened(tid int, ev *Event, fd int) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(tid)+"/fd/"+strconv.Itoa(fd), &st); err != nil {
		return
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		ev.Dir = true
		delete(t.listings, dirKey{t.tgidOf(tid), fd}) // a new directory behind this fd
	case unix.S_IFREG:
		if !ev.Writes() {
			size, mtime := st.Size, st.Mtim.Nano()
			ev.Size, ev.MtimeNS = &size, &mtime
		}
	}
}

// collectListing adds one getdents64 result to its directory's listing and
// emits the listing once the directory has been read to its end.
func (t *tracer) collectListing(tid int, p *pendingCall, res int64) {
	l := t.listings[p.dir]
	if l == nil {
		return
	}
	switch {
	case res > 0:
		buf := t.scratchBuf(int(res))
		n, err := readMem(tid, p.spec.outBuf.of(p.args), buf)
		if err == nil {
			l.entries, err = parseDirents(buf[:n], l.entries)
		}
		if err != nil {
			l.broken = true
		}
	case res == 0:
		delete(t.listings, p.dir)
		if l.broken {
			t.rec.warn("listing of %s could not be read completely; left out of the trace", l.path)
			return
		}
		fillUnknownTypes(l.path, l.entries)
		ev := &p.ev
		ev.Path, ev.Entries = l.path, l.entries
		if ev.Entries == nil {
			ev.Entries = []DirEntry{}
		}
		t.rec.emit(ev, t.start)
	default:
		delete(t.listings, p.dir)
	}
}

// fillUnknownTypes asks lstat for the entries whose file system gave no
// d_type (DT_UNKNOWN, e.g. some network file systems).
func fillUnknownTypes(dir string, entries []DirEntry) {
	for i := range entries {
		if entries[i].Type != "" {
			continue
		}
		entries[i].Type = "other"
		var st unix.Stat_t
		if unix.Lstat(filepath.Join(dir, entries[i].Name), &st) == nil {
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFREG:
				entries[i].Type = "reg"
			case unix.S_IFDIR:
				entries[i].Type = "dir"
			case unix.S_IFLNK:
				entries[i].Type = "symlink"
			}
		}
	}
}

func (t *tracer) tgidOf(tid int) int {
	tk := t.task(tid)
	if tk.tgid == 0 {
		tk.tgid = readTgid(tid)
	}
	return tk.tgid
}

// readTgid reads a thread's process id from /proc (0 if it is gone).
func readTgid(tid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Tgid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// fdPath is the path behind a tracee's fd (or its cwd for AT_FDCWD), read
// at the call's entry, which is when the kernel resolves it too.
func fdPath(tid, fd int) string {
	link := "/proc/" + strconv.Itoa(tid) + "/cwd"
	if fd != atFDCWD {
		link = "/proc/" + strconv.Itoa(tid) + "/fd/" + strconv.Itoa(fd)
	}
	p, err := os.Readlink(link)
	if err != nil {
		return ""
	}
	return p
}

// resolve makes path absolute against dirfd and normalises it lexically.
func resolve(tid, dirfd int, path string) string {
	if filepath.IsAbs(path) {
		return filepath.Clean(path)
	}
	base := fdPath(tid, dirfd)
	if base == "" {
		return filepath.Clean(path) // cannot tell (fd gone): keep it relative
	}
	return filepath.Join(base, path)
}

func errnoName(e syscall.Errno) string {
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return "E" + strconv.Itoa(int(e))
}

// detachSurvivors lets tasks that outlive the main process (daemons) run on
// untraced: each gets a SIGSTOP and is detached at that stop with the signal
// suppressed. It gives up after timeout rather than hang. It returns the
// processes it found and how many tasks it could not detach.
func (t *tracer) detachSurvivors(timeout time.Duration) (processes []int, left int) {
	seen := map[int]bool{}
	for tid := range t.tasks {
		tgid := t.tgidOf(tid)
		if tgid == 0 || unix.Tgkill(tgid, tid, unix.SIGSTOP) != nil {
			delete(t.tasks, tid)
			continue
		}
		if !seen[tgid] {
			seen[tgid] = true
			processes = append(processes, tgid)
		}
	}
	deadline := time.Now().Add(timeout)
	for len(t.tasks) > 0 && time.Now().Before(deadline) {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WALL|unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			break
		}
		if pid == 0 {
			time.Sleep(2 * time.Millisecond)
			continue
		}
		switch {
		case ws.Exited(), ws.Signaled():
			delete(t.tasks, pid)
		case ws.Stopped() && ws.StopSignal() == unix.SIGSTOP:
			_ = unix.PtraceDetach(pid) // at our SIGSTOP: detaching with signal 0 drops it
			delete(t.tasks, pid)
		case ws.Stopped():
			t.task(pid) // may be a new child: it will report its SIGSTOP
			sig := 0
			if s := ws.StopSignal(); s&0x80 == 0 && s != unix.SIGTRAP {
				sig = int(s)
			}
			resume(pid, sig)
		}
	}
	return processes, len(t.tasks)
}

// rawWait4 is wait4(-1, ws, __WALL) without the Go runtime's system call
// bookkeeping. Through unix.Wait4 the tracer thread enters a blocking call
// for every ptrace stop; the runtime's monitor thread then keeps waking every
// 20 us to check on it (a quarter of the run's context switches, and on a VM
// each costs tens of microseconds). Blocked here, the thread keeps its P: the
// other goroutines (signal forwarding) run on the remaining Ps, and the wait
// is short, as every filtered call of the app ends it. The price: a garbage
// collection phase that stops the world while the app computes without any
// filtered call waits for that next call, and SIGINT/SIGTERM forwarding with
// it (the app still gets a terminal's Ctrl-C itself). Measured on the
// loadtest and `import numpy` pilots: 8-9% less CPU for the whole run.
func rawWait4(ws *unix.WaitStatus) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_WAIT4, ^uintptr(0), uintptr(unsafe.Pointer(ws)), unix.WALL, 0, 0, 0)
	if e != 0 {
		return int(r), e
	}
	return int(r), nil
}

package trace

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Prediction: a traced call costs two ptrace stops, one at entry (seccomp)
// and one at exit for the result. For a stat, and for an open that will fail
// because its path does not resolve, the tracer can compute the result itself
// at entry by making the same call on the same path: the event is then
// emitted at entry and the call runs on without an exit stop. These are ~70%
// of Python's and the loader's calls (stats of candidates, opens along a
// library search path).
//
// The tracer's call gives the tracee's result as long as both see the same
// file system with the same rights: same credentials (uid, gids, groups,
// capabilities), root directory, mount and user namespaces and security
// label (AppArmor, SELinux). The tracee starts with the tracer's (it is its
// child); the tracer compares them again after every exec (a set-user-ID
// program) and spawn (clone with new namespaces), and the seccomp filter also
// stops the calls that change them (contextCalls): from the first such call
// or difference on, the run follows every call to its exit. Relative paths
// are resolved through /proc/TID/cwd, which names the tracee's working
// directory even when it was removed; paths relative to another directory fd
// are not predicted, nor paths under /proc and /dev (callerDependent).
//
// What differs from catching the exit: the event's time is the call's entry,
// and a file created or removed by another process between the tracer's call
// and the tracee's is recorded as the tracer saw it (a race whose order is
// arbitrary either way). A stat buffer pointer that is invalid (EFAULT) in
// the tracee is not noticed. TestPredictionMatchesExitStops checks that
// traces are otherwise identical.

// maxPredictPath keeps the tracer's own path (with its /proc prefix) below
// PATH_MAX, where the kernel would answer ENAMETOOLONG only to the tracer.
const maxPredictPath = 4000

// oTmpfileBit is __O_TMPFILE (unix.O_TMPFILE also holds O_DIRECTORY).
const oTmpfileBit = 0x400000

// predict fills in p's outcome when the tracer can compute it at entry.
func (t *tracer) predict(tid int, p *pendingCall) bool {
	raw := p.raw
	if raw == "" || len(raw) > maxPredictPath || callerDependent(p.ev.Path) {
		return false
	}
	host := raw
	if raw[0] != '/' {
		if p.rawDirfd != atFDCWD {
			return false
		}
		host = "/proc/" + strconv.Itoa(tid) + "/cwd/" + raw
	}
	var err error
	switch p.spec.op {
	case OpStat:
		switch p.spec.name {
		case "stat", "lstat", "newfstatat":
			var st unix.Stat_t
			flags := p.ev.Flags // lstat: AT_SYMLINK_NOFOLLOW; newfstatat: the call's flags
			err = unix.Fstatat(unix.AT_FDCWD, host, &st, flags)
		case "statx":
			var stx unix.Statx_t
			err = unix.Statx(unix.AT_FDCWD, host, p.ev.Flags, int(uint32(p.args[3])), &stx)
		default:
			return false
		}
	case OpOpen:
		// Only failures of the path walk are predicted: a successful open
		// returns a descriptor the tracer cannot know in advance, and
		// O_CREAT/O_TMPFILE create what the walk did not find.
		if p.spec.name != "open" && p.spec.name != "openat" {
			return false
		}
		flags := p.ev.Flags
		if flags&(unix.O_CREAT|oTmpfileBit) != 0 {
			return false
		}
		at := 0
		if flags&unix.O_NOFOLLOW != 0 {
			at = unix.AT_SYMLINK_NOFOLLOW // a dangling symlink is ELOOP, not ENOENT
		}
		var st unix.Stat_t
		err = unix.Fstatat(unix.AT_FDCWD, host, &st, at)
		if err != unix.ENOENT && err != unix.ENOTDIR {
			return false
		}
	default:
		return false
	}
	if err != nil {
		e, ok := err.(unix.Errno)
		if !ok {
			return false
		}
		p.ev.Err = errnoName(e)
	}
	return true
}

// callerDependent tells paths whose lookup depends on who looks: under /proc
// ("self", "thread-self" name the tracer when it looks) and /dev (/dev/fd,
// /dev/stdin link into /proc/self). A symlink elsewhere into /proc/self
// (/etc/mtab) is followed by the tracer as itself; such paths are
// node-local and never bundled.
func callerDependent(p string) bool {
	return p == "/proc" || p == "/dev" || strings.HasPrefix(p, "/proc/") || strings.HasPrefix(p, "/dev/")
}

// checkContext stops prediction when task tid does not see the file system
// with the tracer's rights (see above).
func (t *tracer) checkContext(tid int) {
	if t.exact {
		return
	}
	if t.self == "" {
		t.self = taskContext("self")
	}
	if c := taskContext(strconv.Itoa(tid)); c == "" || c != t.self {
		t.exact = true
	}
}

// taskContext is what decides a path lookup's result besides the path, for
// /proc/ID: credentials and capabilities from status, the root directory,
// the mount and user namespaces and the security label ("" if unreadable).
func taskContext(id string) string {
	b, err := os.ReadFile("/proc/" + id + "/status")
	if err != nil {
		return ""
	}
	var out strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		for _, k := range []string{"Uid:", "Gid:", "Groups:", "CapEff:", "CapPrm:"} {
			if strings.HasPrefix(line, k) {
				out.WriteString(line)
				out.WriteByte('\n')
			}
		}
	}
	for _, l := range []string{"root", "ns/mnt", "ns/user"} {
		target, err := os.Readlink("/proc/" + id + "/" + l)
		if err != nil {
			return ""
		}
		out.WriteString(target + "\n")
	}
	// The security label (AppArmor, SELinux): an exec may change the
	// profile, and with it what a lookup is allowed to see.
	label, _ := os.ReadFile("/proc/" + id + "/attr/current")
	out.Write(label)
	return out.String()
}

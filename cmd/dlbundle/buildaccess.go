package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/dlbundle/dlbundle/squash"
)

// access is who may read the image build writes: the mode the umask allows
// (0666 &^ umask, as for any file the user creates), less what the least
// readable input allows (squash.CheckReaders): an input that not every user
// may read takes the image's "other" bits away, one that not every member of
// the image's group may read its group bits.
type access struct {
	mode    os.FileMode
	readers squash.Readers
}

// imageAccess decides the mode of the image file f (nil: a dry run, which
// assumes the caller's group).
func imageAccess(plan *squash.Plan, f *os.File) access {
	gid := uint32(os.Getegid())
	if f != nil {
		if fi, err := f.Stat(); err == nil {
			gid = fi.Sys().(*syscall.Stat_t).Gid // a setgid directory's group, say
		}
	}
	a := access{mode: 0o666 &^ umask(), readers: squash.CheckReaders(plan.Entries, gid)}
	if !a.readers.World {
		a.mode &^= 0o007
	}
	if !a.readers.Group {
		a.mode &^= 0o070
	}
	return a
}

// print says which inputs were private and what that did to the image.
func (a access) print(w io.Writer, verb string, push bool) {
	p := a.readers.Private
	if len(p) == 0 {
		return
	}
	var show []string
	for i := 0; i < len(p) && i < 3; i++ {
		show = append(show, fmt.Sprintf("%s (%s)", p[i].Path, p[i].Why))
	}
	more := ""
	if len(p) > 3 {
		more = fmt.Sprintf(" and %d more", len(p)-3)
	}
	fmt.Fprintf(w, "  %d private input(s), not readable by every user: %s%s; image %s with mode %04o, no more readable than they are; --exclude PREFIX to leave them out\n",
		len(p), strings.Join(show, ", "), more, verb, a.mode)
	if push {
		fmt.Fprintf(w, "  note: whoever can pull the pushed image can read those inputs\n")
	}
}

// umask is the process's file mode creation mask, read from
// /proc/self/status (setting it to read it would change it, for a moment,
// for every thread).
func umask() os.FileMode {
	f, err := os.Open("/proc/self/status")
	if err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "Umask:"); ok {
				if m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
					return os.FileMode(m)
				}
			}
		}
	}
	return 0o022 // kernels before 4.7: the usual default
}

// A trace is a list of paths that its writer chose: a user's trace may name
// /etc/shadow or another user's files. Root building it would bundle them
// into an image the user can read. So root builds a user's traces as that
// user (buildAs): the kernel then decides what the build may read, as it
// decided for the pilot (permissions, ACLs, every directory on the way, and
// whatever the user changes meanwhile). The image is then the user's, in a
// directory the user can write.

// traceOwner returns the uid that owns the traces: 0 if root owns them all,
// the user if one user owns them all, and an error for a mix.
func traceOwner(paths []string) (uint32, error) {
	owners := map[uint32]bool{}
	for _, p := range paths {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			continue // squash.Load names a trace it cannot read
		}
		owners[st.Uid] = true
	}
	var uids []uint32
	for u := range owners {
		uids = append(uids, u)
	}
	sort.Slice(uids, func(i, j int) bool { return uids[i] < uids[j] })
	switch len(uids) {
	case 0:
		return 0, nil
	case 1:
		return uids[0], nil
	}
	return 0, fmt.Errorf("the traces belong to uids %v; as root, build one user's traces at a time (each is built as its owner, with that user's rights)", uids)
}

// buildAs runs this very command as uid, with the user's groups, and ends
// with its exit status.
func buildAs(uid uint32) error {
	cred := &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}
	name := ""
	if u, err := user.LookupId(strconv.Itoa(int(uid))); err == nil {
		name = " (" + u.Username + ")"
		if g, err := strconv.Atoi(u.Gid); err == nil {
			cred.Gid = uint32(g)
		}
		gids, _ := u.GroupIds()
		for _, s := range gids {
			if g, err := strconv.Atoi(s); err == nil {
				cred.Groups = append(cred.Groups, uint32(g))
			}
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "build: the traces belong to uid %d%s: building as that user, so that the image holds only what it may read\n", uid, name)
	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return exitError{ee.ExitCode()}
	}
	if err != nil {
		return fmt.Errorf("run the build as uid %d: %w (dlbundle must be installed where that user can run it)", uid, err)
	}
	return nil
}

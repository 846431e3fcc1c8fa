package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/image/registry"
	"github.com/dlbundle/dlbundle/internal/abspath"
	"github.com/dlbundle/dlbundle/internal/trustpath"
	"github.com/dlbundle/dlbundle/internal/untrusted"
	"github.com/dlbundle/dlbundle/loader/stagefmt"
)

// Root parses nothing. When root stages for a job's user (a Prolog's
// `dlbundle stage --user`), the root process does only what needs root, on
// descriptors, and everything that reads bytes from outside (the image's
// footer, TOC, frames and files, the ld.so probe's output, an oci://
// manifest) is done by a child re-executed from /proc/self/exe as the
// job's user, with no_new_privs, a clean environment, and only the
// descriptors below. The model is OpenSSH's privilege separation, whose
// monitor serves a short list of requests: this is that list, and the code
// below serves nothing else as root (privilegedOps is checked against
// docs/security.md's table by TestPrivilegedOpsDocumented).
//
// Every request is answered with a descriptor or a rename, never with a
// parse: root looks at what the child made only by fstatat on the stage
// directory's descriptor.
var privilegedOps = []privilegedOp{
	{"open stage dir", "walk the stage dir's parents by the Private rule for the user (trustpath), mkdirat the missing ones; then with the user's file-system credentials (asUserFS) walk them again, mkdirat the stage dir, open it O_DIRECTORY|O_NOFOLLOW and check by fstat: a directory of the user's, writable by no one else; root makes and fchowns it only where the user may not write the parent",
		"the stage dir's parents may be root's (a site's --stage-dir)"},
	{"take stage lock", "as the user (asUserFS): openat(stage dir, .lock, O_CREAT|O_NOFOLLOW), fstat: the user's regular file with one link; flock",
		"one stager per node, root's and the user's ranks alike"},
	{"open image", "(a file; an oci:// image is fetched and staged by the child, as the user's ranks do, root checking its answer as for publish) walk the image path by the Shared rule as the user (trustpath) on a thread with the user's file-system ids and groups (asUserFS: the kernel decides, as the user, every search and the read permission), openat O_RDONLY|O_NONBLOCK|O_NOFOLLOW, fstat: the regular file the walk checked; not a byte read",
		"the descriptor is handed to the child before it drops to the user (the child reads the image, root never does)"},
	{"make temp", "as the user (asUserFS): mkdirat(stage dir, tmp.<random>, 0700)",
		"the child writes the stage there, as the user"},
	{"publish", "check the child's one-line answer has the form staged|exists sha256-<64 hex>; fstatat(stage dir, tmp.<random>): a directory of the user's; as the user, renameat2(RENAME_NOREPLACE) to sha256-<hex>",
		"only names in the stage dir are root's to write"},
	{"write alias", "as the user (asUserFS): mkdirat(stage dir, by-path); symlinkat ../sha256-<hex>, renameat",
		"later ranks find the stage without the image"},
	{"clean up", "on any failure of the child, run another child (as the user) that removes tmp.<random>",
		"root never walks a tree the user's child wrote"},
}

type privilegedOp struct{ Request, RootDoes, Why string }

// Account is the user root stages for.
type Account struct {
	Uid, Gid int
	Groups   []int // supplementary groups
}

// StageForRequest says what root stages for whom.
type StageForRequest struct {
	User     Account
	StageDir string // --stage-dir as given ("" for the user's default)
	Image    string // a file path or an oci:// reference, as given
	Workers  int
	Insecure bool // oci://: plain http
	Getenv   func(string) string
	// Exe is the dlbundle binary the child runs ("" for /proc/self/exe).
	Exe string
}

// StageChildVerb is the hidden verb of the parsing child.
const StageChildVerb = "__stage-child"

// StageFor stages an image for another user as root, parsing nothing
// (privilegedOps). The stage is the one the user's own `dlbundle stage`
// would make: the same files, all of them the user's.
func StageFor(ctx context.Context, req StageForRequest) (*Staged, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("staging for uid %d needs root (run dlbundle stage as that user instead)", req.User.Uid)
	}
	if req.User.Uid == 0 {
		return nil, errors.New("StageFor is for another user than root")
	}
	getenv := req.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	u := req.User
	ref, err := AbsImageRef(req.Image)
	if err != nil {
		return nil, err
	}
	// op: open stage dir
	dir, dirf, err := openStageDirAs(stageDirFor(req.StageDir, u.Uid, getenv), u)
	if err != nil {
		return nil, err
	}
	defer dirf.Close()
	alias, err := StageAlias(ref, getenv)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", req.Image, err)
	}
	if s := lookupAliasAs(dirf, dir, alias, u); s != nil {
		return s, nil
	}
	// op: take stage lock
	lock, err := lockStageAs(ctx, dirf, dir, u)
	if err != nil {
		return nil, err
	}
	defer lock.unlock()
	if s := lookupAliasAs(dirf, dir, alias, u); s != nil {
		return s, nil
	}
	child := stageChild{exe: req.Exe, user: u, dir: dir, dirf: dirf}
	if registry.IsRef(ref) {
		// Root has nothing to open: the child stages it as the user's own
		// ranks would, under the user's locks (the stage lock is let go
		// while the registry is waited for), and root checks its answer.
		lock.unlock()
		args := []string{"--ensure", "--ref=" + ref, "--alias=" + alias, "--workers=" + strconv.Itoa(req.Workers)}
		if req.Insecure {
			args = append(args, "--insecure")
		}
		answer, err := child.run(ctx, nil, args)
		if err == nil {
			var s *Staged
			if s, err = publishAs(dirf, dir, "", answer, u); err == nil {
				return s, nil
			}
		}
		return nil, fmt.Errorf("stage %s for uid %d into %s: %w", req.Image, u.Uid, dir, err)
	}
	// op: open image. Not a path this job consumed: its stage, or the
	// refusal, as for the user (OpenImage).
	var name string
	var consumed bool
	asUserFS(u, func() error { name, consumed = consumedRecord(dir, ref, getenv); return nil })
	if consumed {
		if s := stagedAs(dirf, dir, name, u); s != nil {
			return s, nil
		}
		return nil, errConsumedGone(ref, name)
	}
	img, _, err := openImageFileAsUser(ref, u)
	if err != nil {
		return nil, err
	}
	defer img.Close()
	// op: make temp
	tmp, err := makeTempAs(dirf, u)
	if err != nil {
		return nil, fmt.Errorf("create stage in %s: %w", dir, err)
	}
	answer, err := child.run(ctx, img, []string{"--tmp=" + tmp, "--ref=" + ref, "--workers=" + strconv.Itoa(req.Workers)})
	if err == nil {
		// op: publish
		var s *Staged
		if s, err = publishAs(dirf, dir, tmp, answer, u); err == nil {
			// op: write alias (a failure costs later ranks only the image read)
			_ = writeAliasAs(dirf, alias, filepath.Base(s.Dir), u)
			return s, nil
		}
	}
	// op: clean up. Bounded: it runs after a SIGTERM too.
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, cerr := child.run(cctx, nil, []string{"--remove", "--tmp=" + tmp}); cerr != nil {
		err = fmt.Errorf("%w (and removing %s: %v)", err, filepath.Join(dir, tmp), cerr)
	}
	return nil, fmt.Errorf("stage %s for uid %d into %s: %w", req.Image, u.Uid, dir, err)
}

// lookupAliasAs is lookupAlias for root: the alias is read (a link of the
// user's: its target must be ../sha256-<hex>) and the stage looked at by
// fstatat on the stage dir's descriptor; root does not record a use (the
// user's ranks do when they look it up).
func lookupAliasAs(dirf *os.File, dir, alias string, u Account) *Staged {
	if alias == "" {
		return nil
	}
	var s *Staged
	asUserFS(u, func() error {
		target, err := readlinkat(int(dirf.Fd()), filepath.Join(aliasDirName, alias))
		if err != nil {
			return nil
		}
		name := filepath.Base(target)
		if target != filepath.Join("..", name) || !isSHA256Digest(strings.Replace(name, "-", ":", 1)) {
			return nil
		}
		s = stagedAt(dirf, dir, name, u)
		return nil
	})
	return s
}

// stagedAs is the published stage name of the user's, complete, or nil,
// looked at as the user (asUserFS).
func stagedAs(dirf *os.File, dir, name string, u Account) (s *Staged) {
	asUserFS(u, func() error { s = stagedAt(dirf, dir, name, u); return nil })
	return s
}

func stagedAt(dirf *os.File, dir, name string, u Account) *Staged {
	var st unix.Stat_t
	if unix.Fstatat(int(dirf.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != u.Uid {
		return nil
	}
	for _, n := range stagefmt.Essentials {
		if !existsBeneath(int(dirf.Fd()), filepath.Join(name, n)) {
			return nil
		}
	}
	return &Staged{Dir: filepath.Join(dir, name)}
}

// existsBeneath reports whether name is below dirfd with no symbolic link
// on the way (the user's stage may hold links anywhere: root follows none).
func existsBeneath(dirfd int, name string) bool {
	fd, err := unix.Openat2(dirfd, name, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
	if err == unix.ENOSYS { // before Linux 5.6: the last component unfollowed only
		var st unix.Stat_t
		return unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
	}
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}

func readlinkat(dirfd int, name string) (string, error) {
	buf := make([]byte, 256)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return "", err
	}
	if n == len(buf) {
		return "", unix.ENAMETOOLONG
	}
	return string(buf[:n]), nil
}

// stageDirFor resolves the stage dir of uid as the user's own dlbundle
// would: the flag, then DLBUNDLE_STAGE_DIR, then the default, %u and %U
// being the user's.
func stageDirFor(flag string, uid int, getenv func(string) string) string {
	if flag == "" {
		flag = getenv(StageDirEnv)
	}
	if flag != "" {
		return expandStageDirFor(flag, getenv, uid)
	}
	name := "dlbundle-" + strconv.Itoa(uid)
	if isWritableTmpfs("/dev/shm") {
		return filepath.Join("/dev/shm", name)
	}
	return filepath.Join("/tmp", name)
}

// openStageDirAs is OpenStageDir for the user u, run by root. Root walks
// the parents by the Private rule for u and makes the missing ones (a
// site's /local/dlbundle, which u could not make); everything after is
// done with u's file-system credentials (asUserFS): the parents walked
// again, so that the kernel decides u may search each, and the stage dir
// made by u (theirs, no chown) and opened by u. Only where u may not write
// the parent (a directory of root's) does root make the stage dir and give
// it to u. A name another user squatted is refused (the fallback lives in
// the user's keyring: the user's ranks find their own).
func openStageDirAs(asked string, u Account) (string, *os.File, error) {
	abs, err := abspath.Abs(asked)
	if err != nil {
		return "", nil, err
	}
	if err := stagefmt.CheckStagePath(abs); err != nil {
		return "", nil, err
	}
	if err := checkLoaderSplit(abs); err != nil {
		return "", nil, err
	}
	refused := func(err error) error {
		var refusal *trustpath.Error
		if errors.As(err, &refusal) {
			return refuseStageDir(abs, "lies below "+refusal.At+", "+refusal.Why)
		}
		return fmt.Errorf("stage dir %s: %w", abs, err)
	}
	w := &trustpath.Walker{Rule: trustpath.Private, Uid: uint32(u.Uid), Create: true}
	pd, err := w.WalkDir(filepath.Dir(abs))
	if err != nil {
		return "", nil, refused(err)
	}
	defer pd.Close()
	name := filepath.Base(abs)
	abs = pd.Join(name)
	var upd *trustpath.Dir // the parent as u reached it
	defer func() { upd.Close() }()
	rootMakes := false
	if err := asUserFS(u, func() error {
		uw := &trustpath.Walker{Rule: trustpath.Private, Uid: uint32(u.Uid)}
		var err error
		if upd, err = uw.WalkDir(filepath.Dir(abs)); err != nil {
			if errors.Is(err, unix.EACCES) {
				return fmt.Errorf("%w: stage dir %s: uid %d may not reach it (%v); root stages only where the job's user could stage themselves", ErrUnsafeStageDir, abs, u.Uid, err)
			}
			return refused(err)
		}
		if upd.Node.Dev != pd.Node.Dev || upd.Node.Ino != pd.Node.Ino {
			return fmt.Errorf("stage dir %s: %s was replaced while it was walked; try again", abs, pd.Path)
		}
		// The walk searched every directory above the parent as the user;
		// looking up the stage dir's name searches the parent.
		var st unix.Stat_t
		switch err := unix.Fstatat(upd.FD, upd.Name(name), &st, unix.AT_SYMLINK_NOFOLLOW); err {
		case nil:
			return nil
		case unix.ENOENT:
		case unix.EACCES:
			return fmt.Errorf("%w: stage dir %s: uid %d may not reach it (%s: %v); root stages only where the job's user could stage themselves", ErrUnsafeStageDir, abs, u.Uid, pd.Path, err)
		default:
			return fmt.Errorf("stage dir %s: %w", abs, err)
		}
		switch err := unix.Mkdirat(upd.FD, upd.Name(name), 0o700); err {
		case nil, unix.EEXIST:
		case unix.EACCES, unix.EPERM:
			rootMakes = true // a parent of root's, searchable, not writable by the user
		default:
			return fmt.Errorf("create stage dir %s: %w", abs, err)
		}
		return nil
	}); err != nil {
		return "", nil, err
	}
	if rootMakes {
		// A parent of root's that u may not write: root makes the stage
		// dir, and gives it to u only if it made it (openDirGive).
		err := unix.Mkdirat(pd.FD, pd.Name(name), 0o700)
		if err != nil && err != unix.EEXIST {
			return "", nil, fmt.Errorf("create stage dir %s: %w", abs, err)
		}
		if err == nil {
			f, _, err := openDirGive(pd.FD, pd.Name(name), u, true)
			if err != nil {
				return "", nil, fmt.Errorf("stage dir %s: %w", abs, err)
			}
			f.Close()
		}
	}
	var f *os.File
	err = asUserFS(u, func() error {
		var lst unix.Stat_t
		if err := unix.Fstatat(upd.FD, upd.Name(name), &lst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("stage dir %s: %w", abs, err)
		}
		switch {
		case lst.Mode&unix.S_IFMT == unix.S_IFLNK:
			return refuseStageDir(abs, "is a symbolic link")
		case int(lst.Uid) != u.Uid && isShared(&unix.Stat_t{Mode: pd.Node.Mode}):
			return fmt.Errorf("%w: stage dir %s is owned by uid %d (squatted), not %d; staging for the user as root uses no fallback: the job's ranks stage it into their own (or give --stage-dir)",
				ErrUnsafeStageDir, abs, lst.Uid, u.Uid)
		case int(lst.Uid) != u.Uid:
			return refuseStageDir(abs, fmt.Sprintf("is owned by uid %d, not %d", lst.Uid, u.Uid))
		}
		fd, err := unix.Openat(upd.FD, upd.Name(name), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("stage dir %s: uid %d cannot open it: %w", abs, u.Uid, err)
		}
		f = os.NewFile(uintptr(fd), abs)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		switch {
		case st.Dev != lst.Dev || st.Ino != lst.Ino || int(st.Uid) != u.Uid:
			return fmt.Errorf("stage dir %s was replaced while it was opened; try again", abs)
		case st.Mode&0o022 != 0:
			return refuseStageDir(abs, fmt.Sprintf("has mode %#o (group or world writable)", st.Mode&0o7777))
		}
		return nil
	})
	if err != nil {
		if f != nil {
			f.Close()
		}
		return "", nil, err
	}
	return abs, f, nil
}

// openDirGive opens the directory name in dirfd (never through a symbolic
// link) and, when root just made it (made), gives it to u. Only a directory
// root made is given away, and only while it is still root's and empty: an
// existing directory of root's at the name (a --stage-dir of /root) stays
// root's, and is then refused as not the user's.
func openDirGive(dirfd int, name string, u Account, made bool) (*os.File, *unix.Stat_t, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, nil, err
	}
	if made && st.Uid == 0 && st.Nlink == 2 {
		if err := unix.Fchown(fd, u.Uid, u.Gid); err != nil {
			f.Close()
			return nil, nil, err
		}
		st.Uid, st.Gid = uint32(u.Uid), uint32(u.Gid)
	}
	return f, &st, nil
}

// lockStageAs takes the stage lock in the user's stage dir (dirf). The
// lock file is made and opened with the user's file-system credentials
// (asUserFS): it is the user's as if the user had made it, so that the
// user's ranks can take it after, and root gives nothing away. An existing
// .lock must be the user's regular file with one link (a hard link to
// /etc/shadow put there is refused, and the kernel would refuse the user
// opening it anyway).
func lockStageAs(ctx context.Context, dirf *os.File, dir string, u Account) (*stageLock, error) {
	path := filepath.Join(dir, stageLockName)
	const flags = unix.O_RDWR | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC
	var f *os.File
	err := asUserFS(u, func() error {
		var st unix.Stat_t
		if unix.Fstatat(int(dirf.Fd()), stageLockName, &st, unix.AT_SYMLINK_NOFOLLOW) == nil &&
			(st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1) {
			return fmt.Errorf("stage lock %s is not a regular file with one link; remove it", path)
		}
		fd, err := unix.Openat(int(dirf.Fd()), stageLockName, flags|unix.O_CREAT, 0o600)
		if err != nil {
			return fmt.Errorf("open stage lock %s as uid %d: %w", path, u.Uid, err)
		}
		f = os.NewFile(uintptr(fd), path)
		if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 {
			return fmt.Errorf("stage lock %s is not a regular file with one link; remove it", path)
		}
		if int(st.Uid) != u.Uid {
			return fmt.Errorf("stage lock %s is owned by uid %d, not %d; remove it", path, st.Uid, u.Uid)
		}
		return nil
	})
	if err != nil {
		if f != nil {
			f.Close()
		}
		return nil, err
	}
	if err := lockFile(ctx, f); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("waiting for the stage lock %s: %w", f.Name(), ctx.Err())
		}
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return &stageLock{f: f}, nil
}

// makeTempAs makes the user's empty tmp.<random> in the stage dir, as the
// user (asUserFS).
func makeTempAs(dirf *os.File, u Account) (string, error) {
	name := "tmp." + randomName()
	err := asUserFS(u, func() error {
		if err := unix.Mkdirat(int(dirf.Fd()), name, 0o700); err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Fstatat(int(dirf.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != u.Uid {
			return fmt.Errorf("%s is not uid %d's", name, u.Uid)
		}
		return nil
	})
	return name, err
}

// publishAs checks the child's answer ("staged sha256-<hex>": tmp holds
// the stage; "exists sha256-<hex>": another stager published it) by its
// form and by fstatat on the stage dir, and renames tmp into place. With
// no tmp (an oci:// image, which the child published as the user would),
// both answers name a published stage.
func publishAs(dirf *os.File, dir, tmp, answer string, u Account) (*Staged, error) {
	verb, name, _ := strings.Cut(strings.TrimSuffix(answer, "\n"), " ")
	hex, _ := strings.CutPrefix(name, "sha256-")
	if verb != "staged" && verb != "exists" || !isSHA256Digest("sha256:"+hex) {
		return nil, fmt.Errorf("the staging child answered %s, not staged|exists sha256-<hex>", untrusted.Quote(answer))
	}
	dfd := int(dirf.Fd())
	isUsersDir := func(n string) error {
		var st unix.Stat_t
		if err := unix.Fstatat(dfd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != u.Uid {
			return fmt.Errorf("%s is not a directory of uid %d", filepath.Join(dir, n), u.Uid)
		}
		return nil
	}
	s := &Staged{Dir: filepath.Join(dir, name), Digest: "sha256:" + hex}
	if verb == "exists" || tmp == "" {
		s.Materialized = verb == "staged"
		if err := isUsersDir(name); err != nil {
			return nil, err
		}
		return s, nil
	}
	if err := isUsersDir(tmp); err != nil {
		return nil, err
	}
	if err := asUserFS(u, func() error { return unix.Renameat2(dfd, tmp, dfd, name, unix.RENAME_NOREPLACE) }); err != nil {
		return nil, fmt.Errorf("publish stage %s: %w", s.Dir, err)
	}
	s.Materialized = true
	return s, nil
}

// writeAliasAs is writeAlias on the stage dir's descriptor, as the user
// (asUserFS): the alias directory and the link are the user's as the user
// made them (its owner may set its times: a rank records its use there).
func writeAliasAs(dirf *os.File, alias, name string, u Account) error {
	if alias == "" {
		return nil
	}
	return asUserFS(u, func() error {
		err := unix.Mkdirat(int(dirf.Fd()), aliasDirName, 0o700)
		if err != nil && err != unix.EEXIST {
			return err
		}
		bfd, err := unix.Openat(int(dirf.Fd()), aliasDirName, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(bfd)
		var st unix.Stat_t
		if err := unix.Fstat(bfd, &st); err != nil {
			return err
		}
		if int(st.Uid) != u.Uid {
			return fmt.Errorf("%s is not uid %d's", aliasDirName, u.Uid)
		}
		tmp := ".tmp." + randomName()
		if err := unix.Symlinkat(filepath.Join("..", name), bfd, tmp); err != nil {
			return err
		}
		if err := unix.Renameat(bfd, tmp, bfd, alias); err != nil {
			unix.Unlinkat(bfd, tmp, 0)
			return err
		}
		return nil
	})
}

// stageChild runs the parsing child: dlbundle __stage-child as the user.
type stageChild struct {
	exe  string
	user Account
	dir  string
	dirf *os.File
}

// childOutputMax bounds what root keeps of the child's output: its answer
// is one line; its error, for the message.
const childOutputMax = 64 << 10

// run runs the child with the image (or nil) as fd 3 and the stage dir as
// fd 4, and returns its answer (stdout). A failure carries the child's
// error (its stderr, escaped) or the signal that ended it. ctx ending kills
// the child.
func (c stageChild) run(ctx context.Context, img *os.File, args []string) (string, error) {
	exe := c.exe
	if exe == "" {
		exe = "/proc/self/exe"
	}
	groups := make([]uint32, len(c.user.Groups))
	for i, g := range c.user.Groups {
		groups[i] = uint32(g)
	}
	if img == nil {
		img = devNull()
		if img != nil {
			defer img.Close()
		}
	}
	cmd := &exec.Cmd{
		Path: exe,
		Args: append([]string{"dlbundle", StageChildVerb, "--stage-dir=" + c.dir}, args...),
		// A clean environment: nothing of root's (a Prolog's) reaches the
		// code that reads the image.
		Env:        []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"},
		Dir:        "/",
		ExtraFiles: []*os.File{img, c.dirf},
		SysProcAttr: &syscall.SysProcAttr{
			// setgroups, setgid, setuid (real, effective and saved) before
			// exec; no_new_privs comes from the forking thread (below).
			Credential: &syscall.Credential{Uid: uint32(c.user.Uid), Gid: uint32(c.user.Gid), Groups: groups},
			Pdeathsig:  syscall.SIGKILL, // root gone: so is the child
		},
	}
	var out, errb capped
	cmd.Stdout, cmd.Stderr = &out, &errb
	started := make(chan error, 1)
	ended := make(chan error, 1)
	go func() {
		// no_new_privs before exec: prctl sets it on this thread, which
		// forks the child (the flag is inherited through fork and exec).
		// The thread stays locked and dies with this goroutine, after
		// the child: Pdeathsig fires when the thread that forked the
		// child exits, not the process, and no other goroutine may run
		// with the flag by surprise.
		runtime.LockOSThread()
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			started <- fmt.Errorf("set no_new_privs for the staging child: %w", err)
			return
		}
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("start the staging child as uid %d: %w", c.user.Uid, err)
			return
		}
		started <- nil
		ended <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return "", err
	}
	var err error
	select {
	case err = <-ended:
	case <-ctx.Done():
		cmd.Process.Kill()
		err = <-ended
	}
	if err == nil {
		return out.String(), nil
	}
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "", fmt.Errorf("the staging child (uid %d) was killed by signal %d (%v)", c.user.Uid, ws.Signal(), ws.Signal())
		}
		msg := strings.TrimPrefix(strings.TrimSpace(errb.String()), "dlbundle "+StageChildVerb+": ")
		if msg == "" {
			return "", fmt.Errorf("the staging child (uid %d) failed: %v", c.user.Uid, err)
		}
		return "", errors.New(escapeLines(firstLines(msg, 20)))
	}
	return "", err
}

// escapeLines escapes each line of the child's message: it may hold text
// from the image.
func escapeLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = untrusted.Quote(l)
	}
	return strings.Join(lines, "\n")
}

// firstLines keeps the first n lines of s (a Go panic's goroutine dump
// would bury the reason).
func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) <= n {
		return s
	}
	return strings.Join(lines[:n], "\n") + "\n(more of the child's error left out)"
}

func devNull() *os.File {
	f, err := os.Open(os.DevNull)
	if err != nil {
		return nil
	}
	return f
}

// capped keeps the first childOutputMax bytes written to it.
type capped struct{ bytes.Buffer }

func (c *capped) Write(p []byte) (int, error) {
	if room := childOutputMax - c.Len(); room > 0 {
		c.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

var _ io.Writer = (*capped)(nil)

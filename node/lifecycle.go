package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/internal/trustpath"
)

// StageInfo describes one published stage of a stage directory.
type StageInfo struct {
	Name    string    // sha256-<hex>
	Size    int64     // bytes of its files (on tmpfs: memory)
	LastUse time.Time // newest of: published, an alias written to it or used (lookupAlias)
	InUse   []int     // PIDs of processes that map a file of it or run with it as DLBUNDLE_STAGE
	Aliases []string  // names in by-path/ that point at it
	// Consumed: a job consumed its image file (stage --consume) and has not
	// ended (its epilog's gc --job removes the record): the stage is the
	// node's only copy and gc keeps it.
	Consumed bool

	aliasTimes []time.Time // mtimes of Aliases when listed (a rank's use updates one: lookupAlias)
}

// ListStages lists the published stages of dir, most recently used first.
func ListStages(dir string) ([]StageInfo, error) {
	d, err := trustpath.For(trustpath.Private).WalkDir(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	ents := dirEntries(d)
	byName := map[string]*StageInfo{}
	var out []*StageInfo
	for _, e := range ents {
		// Only names Stage publishes (digestDirName): anything else that
		// starts with sha256- was not made by dlbundle and is left alone.
		if !e.IsDir() || !isSHA256Digest(strings.Replace(e.Name(), "-", ":", 1)) {
			continue
		}
		s := &StageInfo{Name: e.Name()}
		if fi, err := e.Info(); err == nil {
			s.LastUse = fi.ModTime()
		}
		s.Size = treeSize(filepath.Join(dir, e.Name()))
		byName[s.Name] = s
		out = append(out, s)
	}
	bd, _ := d.Enter(d.Join(aliasDirName), aliasDirName, 0)
	for _, a := range heldEntries(bd) {
		target, err := readlinkat(bd.FD, bd.Name(a.Name()))
		if err != nil {
			continue
		}
		if s := byName[filepath.Base(target)]; s != nil {
			var mtime time.Time
			if fi, err := a.Info(); err == nil {
				mtime = fi.ModTime()
			}
			s.Aliases = append(s.Aliases, a.Name())
			s.aliasTimes = append(s.aliasTimes, mtime)
			s.Consumed = s.Consumed || isConsumedAlias(a.Name())
			if mtime.After(s.LastUse) {
				s.LastUse = mtime
			}
		}
	}
	bd.Close()
	users := stageUsers(dir)
	for _, s := range out {
		s.InUse = users[s.Name]
	}
	sort.Slice(out, func(i, j int) bool { return out[i].LastUse.After(out[j].LastUse) })
	res := make([]StageInfo, len(out))
	for i, s := range out {
		res[i] = *s
	}
	return res, nil
}

func treeSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// stageUsers maps stage names to the processes that use them: a process
// uses a stage if a file of it is mapped (/proc/PID/maps: the shim, the
// table, libraries, the executable) or if its environment names it
// (DLBUNDLE_STAGE=, inherited by every child, also a script interpreter
// that maps nothing from the stage yet). Processes whose files cannot be
// read (other users, when not root) cannot use this user's stage dir.
func stageUsers(dir string) map[string][]int {
	users := map[string][]int{}
	prefix := []byte(dir + "/sha256-")
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid := 0
		if _, err := fmt.Sscan(p.Name(), &pid); err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		seen := map[string]bool{}
		for _, f := range []string{"maps", "environ"} {
			data, err := os.ReadFile(filepath.Join("/proc", p.Name(), f))
			if err != nil {
				continue
			}
			for rest := data; ; {
				i := bytes.Index(rest, prefix)
				if i < 0 {
					break
				}
				rest = rest[i+len(prefix)-len("sha256-"):]
				end := bytes.IndexAny(rest, "/\x00\n ")
				if end < 0 {
					end = len(rest)
				}
				name := string(rest[:end])
				rest = rest[end:]
				if !seen[name] {
					seen[name] = true
					users[name] = append(users[name], pid)
				}
			}
		}
	}
	return users
}

// GCOptions say what gc may remove.
type GCOptions struct {
	// Job: remove the aliases written inside this batch job (its epilog).
	Job string
	// Keep: keep unused stages, most recently used first, up to this many
	// bytes in total (0: keep none).
	Keep int64
	// OlderThan: remove only unused stages not used for this long.
	OlderThan time.Duration
	// Grace: never remove a stage used (published, aliased, or found
	// through an alias) this recently, because a rank that found it through
	// its alias without the lock may be about to exec from it (the CLI's
	// default: 1 minute; never less than MinGrace).
	Grace time.Duration
	// DryRun: decide, report, remove nothing.
	DryRun bool
	// Only: consider only the stage of this name (sha256-<hex>); the others
	// are neither removed nor reported as kept.
	Only string
}

// MinGrace is the shortest grace gc uses, whatever it is asked: the time a
// rank takes from finding a stage through its alias to having it mapped is
// milliseconds, and with no grace at all gc removed the stage under 2 to 14
// of 300 racing warm execs (--grace 0s), which then started without the shim.
const MinGrace = 2 * time.Second

// GCResult says what gc removed (or, with DryRun, would remove).
type GCResult struct {
	Stages  []StageInfo
	Freed   int64
	Aliases int
	Kept    []StageInfo // unused stages kept by Keep, OlderThan or Grace
	InUse   []StageInfo
}

// GC removes the stages of dir that no running process uses, within
// opts, and the aliases of a finished job and those left dangling. It holds
// the stage lock throughout, so no exec stages meanwhile; a stage is first
// renamed to tmp.* (a rank that reads its alias from then on finds nothing
// and stages anew under the lock) and then deleted.
func GC(ctx context.Context, dir string, opts GCOptions) (*GCResult, error) {
	lock, _, err := lockStage(ctx, filepath.Join(dir, stageLockName), nil)
	if err != nil {
		return nil, err
	}
	defer lock.unlock()
	if !opts.DryRun {
		if err := removeStaleTemps(dir); err != nil {
			return nil, err
		}
		removeIdleFetches(dir)
	}
	res := &GCResult{}
	// The stage dir and its aliases' directory, held: every name below is
	// listed, read and removed by descriptor.
	d, err := trustpath.For(trustpath.Private).WalkDir(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	bd, _ := d.Enter(d.Join(aliasDirName), aliasDirName, 0) // nil: no aliases yet
	defer bd.Close()
	if opts.Job != "" {
		prefix := AliasJobPrefix(opts.Job)
		for _, a := range heldEntries(bd) {
			if strings.HasPrefix(a.Name(), prefix) {
				res.Aliases++
				if !opts.DryRun {
					// Keep the job's use of the stage as its last use.
					if fi, err := a.Info(); err == nil {
						if t, err := readlinkat(bd.FD, bd.Name(a.Name())); err == nil {
							touchIfOlder(filepath.Join(dir, filepath.Base(t)), fi.ModTime())
						}
					}
					unix.Unlinkat(bd.FD, bd.Name(a.Name()), 0)
				}
			}
		}
	}
	if !opts.DryRun {
		// The job's failure markers (stage.go) name its aliases. A failure
		// marker answers only the ranks that waited for the failing stager
		// or came within failureReuse of it: one older than staleFailure
		// answers no one (a finished job's, whose epilog ran no gc --job),
		// so plain gc removes it too. We hold the lock: no waiter is
		// between the failure and its reading.
		for _, n := range dirNames(d) {
			if !strings.HasPrefix(n, failedPrefix) {
				continue
			}
			var st unix.Stat_t
			switch {
			case opts.Job != "" && strings.HasPrefix(n, failedPrefix+AliasJobPrefix(opts.Job)):
			case unix.Fstatat(d.FD, d.Name(n), &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG &&
				time.Since(time.Unix(st.Mtim.Unix())) > staleFailure:
			default:
				continue
			}
			unix.Unlinkat(d.FD, d.Name(n), 0)
		}
	}
	stages, err := ListStages(dir)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	grace := max(opts.Grace, MinGrace)
	var kept int64
	for _, s := range stages { // most recently used first
		switch {
		case opts.Only != "" && s.Name != opts.Only:
			continue
		case len(s.InUse) > 0:
			res.InUse = append(res.InUse, s)
			continue
		case s.Consumed:
			kept += s.Size
			res.Kept = append(res.Kept, s)
			continue
		case now.Sub(s.LastUse) < grace,
			opts.OlderThan > 0 && now.Sub(s.LastUse) < opts.OlderThan,
			kept+s.Size <= opts.Keep:
			kept += s.Size
			res.Kept = append(res.Kept, s)
			continue
		}
		if !opts.DryRun {
			removed, aliases, err := removeStage(dir, s)
			res.Aliases += aliases
			if err != nil {
				return res, err
			}
			if !removed { // used since it was listed
				res.Kept = append(res.Kept, s)
				continue
			}
		}
		res.Stages = append(res.Stages, s)
		res.Freed += s.Size
	}
	// Aliases whose stage is gone (removed by hand or above) serve nothing;
	// a consumed record still does: it stops its job from opening the freed
	// path again (another user may have put a file there), until the job's
	// epilog (gc --job) removes it; so does a broadcast record, which names
	// no stage (the job's later steps skip the copy).
	for _, a := range heldEntries(bd) {
		if isConsumedAlias(a.Name()) || isBcastAlias(a.Name()) {
			continue
		}
		t, err := readlinkat(bd.FD, bd.Name(a.Name()))
		if err == nil && !isDir(filepath.Join(dir, filepath.Base(t))) {
			res.Aliases++
			if !opts.DryRun {
				unix.Unlinkat(bd.FD, bd.Name(a.Name()), 0)
			}
		}
	}
	return res, nil
}

// removeStage removes an unused stage s of dir, unless a process has found
// it through one of its aliases since it was listed. Such a process records
// its use on the alias before it checks that the stage exists
// (lookupAlias), and gc holds the stage lock, so no alias is written
// meanwhile. The stage is first renamed away; then either a use shows on an
// alias (it is put back) or every later check of the stage finds nothing and
// stages anew under the lock: no process can have checked the stage and
// still be on its way to start the app from it when it is deleted.
func removeStage(dir string, s StageInfo) (removed bool, aliases int, err error) {
	d, err := trustpath.For(trustpath.Private).WalkDir(dir)
	if err != nil {
		return false, 0, fmt.Errorf("remove stage %s: %w", s.Name, err)
	}
	defer d.Close()
	tmp := "tmp.gc-" + randomName()
	if err := unix.Renameat(d.FD, d.Name(s.Name), d.FD, d.Name(tmp)); err != nil {
		return false, 0, fmt.Errorf("remove stage %s: %w", s.Name, err)
	}
	used := consumedSince(dir, s.Name) // a job consumed its image after the listing
	for i, a := range s.Aliases {
		if fi, err := os.Lstat(filepath.Join(dir, aliasDirName, a)); err == nil && !fi.ModTime().Equal(s.aliasTimes[i]) {
			used = true
		}
	}
	if used {
		if err := unix.Renameat(d.FD, d.Name(tmp), d.FD, d.Name(s.Name)); err != nil {
			return false, 0, fmt.Errorf("put back stage %s, used while gc removed it: %w", s.Name, err)
		}
		return false, 0, nil
	}
	if bd, err := d.Enter(d.Join(aliasDirName), aliasDirName, 0); err == nil {
		for _, a := range s.Aliases {
			if unix.Unlinkat(bd.FD, bd.Name(a), 0) == nil {
				aliases++
			}
		}
		bd.Close()
	}
	if err := removeTree(d.Join(tmp)); err != nil {
		return true, aliases, fmt.Errorf("remove stage %s: %w", s.Name, err)
	}
	return true, aliases, nil
}

// removeIdleFetches removes the downloads and results of oci:// fetches
// (fetchImage) that no process is doing: those whose fetch lock is free. The
// lock files stay (one per reference fetched on the node, empty): removing a
// lock file that another process is about to open would give two fetchers
// two locks. All by descriptor in the stage dir, walked by the Private rule.
func removeIdleFetches(dir string) {
	d, err := trustpath.For(trustpath.Private).WalkDir(dir)
	if err != nil {
		return
	}
	defer d.Close()
	for _, n := range dirNames(d) {
		if !strings.HasPrefix(n, ".fetch-") || !strings.HasSuffix(n, ".lock") {
			continue
		}
		key := strings.TrimSuffix(strings.TrimPrefix(n, ".fetch-"), ".lock")
		fd, err := unix.Openat(d.FD, d.Name(n), unix.O_RDWR|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		if flock(fd, unix.LOCK_EX|unix.LOCK_NB) == nil {
			removeFetchLeftoversIn(d, key)
			unix.Unlinkat(d.FD, d.Name(fetchPrefix+key+".result"), 0)
		}
		unix.Close(fd)
	}
}

// dirNames lists the held directory d (its O_PATH descriptor cannot be
// read: a descriptor is opened in it).
func dirNames(d *trustpath.Dir) []string {
	fd, err := unix.Openat(d.FD, d.Name("."), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), d.Path)
	defer f.Close()
	names, _ := f.Readdirnames(-1)
	return names
}

// heldEntries is dirEntries of d, or nothing for a nil d (a directory
// that is not there).
func heldEntries(d *trustpath.Dir) []os.DirEntry {
	if d == nil {
		return nil
	}
	return dirEntries(d)
}

// dirEntries lists the held directory d, with each entry's type.
func dirEntries(d *trustpath.Dir) []os.DirEntry {
	fd, err := unix.Openat(d.FD, d.Name("."), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), d.Path)
	defer f.Close()
	ents, _ := f.ReadDir(-1)
	return ents
}

// consumedSince reports whether a consumed record points at stage name.
func consumedSince(dir, name string) bool {
	d, err := trustpath.For(trustpath.Private).WalkDir(filepath.Join(dir, aliasDirName))
	if err != nil {
		return false
	}
	defer d.Close()
	for _, a := range dirNames(d) {
		if !isConsumedAlias(a) {
			continue
		}
		if t, err := readlinkat(d.FD, d.Name(a)); err == nil && filepath.Base(t) == name {
			return true
		}
	}
	return false
}

// touchIfOlder sets the times of path (not through a link at its name) to
// t if they are older, by descriptor in its directory.
func touchIfOlder(path string, t time.Time) {
	d, err := trustpath.For(trustpath.Private).WalkDir(filepath.Dir(path))
	if err != nil {
		return
	}
	defer d.Close()
	name := d.Name(filepath.Base(path))
	var st unix.Stat_t
	if unix.Fstatat(d.FD, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && time.Unix(st.Mtim.Unix()).Before(t) {
		ts := unix.NsecToTimespec(t.UnixNano())
		unix.UtimesNanoAt(d.FD, name, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
	}
}

// ErrNoJob is returned by ConsumeImage outside a batch job.
var ErrNoJob = errors.New("not inside a batch job")

// RetireReplaced removes the stages of dir that were staged from ref (the
// same image path or reference) but are not keep, the stage just published
// for its new content: a rebuilt image (a fold) replaces its old stage, so
// that folds never pile up copies in /dev/shm. gc's rule decides (under the
// stage lock, as gc): a stage that a process uses (maps a file of, or runs
// with), that a job consumed, or that was used within MinGrace (a rank that
// found it through an alias may be on its way to exec from it) stays, for
// a later gc. Returns the stages removed.
func RetireReplaced(ctx context.Context, dir, keep, ref string) ([]StageInfo, error) {
	if ref == "" {
		return nil, nil
	}
	var old []string
	d, err := trustpath.For(trustpath.Private).WalkDir(dir)
	if err != nil {
		return nil, nil
	}
	ents := dirEntries(d)
	d.Close()
	for _, e := range ents {
		if e.IsDir() && e.Name() != keep && strings.HasPrefix(e.Name(), "sha256-") && StageRef(dir, e.Name()) == ref {
			old = append(old, e.Name())
		}
	}
	if len(old) == 0 {
		return nil, nil // (no lock, no walk of /proc: the usual case)
	}
	lock, _, err := lockStage(ctx, filepath.Join(dir, stageLockName), nil)
	if err != nil {
		return nil, err
	}
	defer lock.unlock()
	stages, err := ListStages(dir)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var removed []StageInfo
	for _, s := range stages {
		if s.Name == keep || !slices.Contains(old, s.Name) || len(s.InUse) > 0 || s.Consumed || now.Sub(s.LastUse) < MinGrace {
			continue
		}
		ok, _, err := removeStage(dir, s)
		if err != nil {
			return removed, err
		}
		if ok {
			removed = append(removed, s)
		}
	}
	return removed, nil
}

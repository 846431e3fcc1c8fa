package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/internal/abspath"
	"github.com/dlbundle/dlbundle/internal/trustpath"
)

// A node-local copy of the image (sbcast, srun --bcast-like copies, a
// prolog's download) is needed only until it is staged: ConsumeImage removes
// it and leaves a record, so that the node holds one copy (the stage), and
// the job's later launches that name the same path find the stage through
// the record instead of failing on the missing file (OpenImage). The record
// is a by-path alias keyed on the path and the batch job: it never outlives
// its meaning (gc --job removes it), and a later job that copies a new image
// to the same path reads that file. Nor does it end before its job: gc keeps
// a consumed stage and its record until the job's epilog (gc --job), since
// the freed path may hold another user's file by then.

// isConsumedAlias reports whether an alias name is the record of a consumed
// image (ConsumedKey): job-<id>.consumed-<64 hex>. gc removes such a record
// only with its job (gc --job), never with its stage, and keeps the stage.
func isConsumedAlias(name string) bool {
	i := strings.LastIndex(name, ".consumed-")
	return strings.HasPrefix(name, "job-") && i > 0 && isSHA256Digest("sha256:"+name[i+len(".consumed-"):])
}

// ConsumedKey is the alias name of the record of a consumed image.
func ConsumedKey(ref string, getenv func(string) string) (string, error) {
	job := BatchJobID(getenv)
	if job == "" {
		return "", fmt.Errorf("--consume: %w; the record of a consumed copy lasts for one job (stage without --consume outside a job)", ErrNoJob)
	}
	h := sha256.Sum256([]byte("dlbundle-consumed-v1\x00" + ref + "\x00" + job))
	return AliasJobPrefix(job) + "consumed-" + hex.EncodeToString(h[:]), nil
}

// ConsumeImage records that the image at ref is staged in s and removes the
// file. The caller has staged it. If the job had consumed ref before, the
// file was not read now (OpenImage looks at the record first): then it is
// left where it is and removed is false.
func ConsumeImage(stageDir, ref string, s *Staged, getenv func(string) string) (removed bool, err error) {
	key, err := ConsumedKey(ref, getenv)
	if err != nil {
		return false, err
	}
	if _, ok := consumedRecord(stageDir, ref, getenv); ok {
		return false, nil
	}
	if err := writeAlias(stageDir, key, filepath.Base(s.Dir)); err != nil {
		return false, err
	}
	if err := removeConsumed(ref); err != nil {
		return false, fmt.Errorf("--consume: remove the staged copy %s: %w", ref, err)
	}
	return true, nil
}

// removeConsumed unlinks the file at ref from the directory the trust walk
// reaches (the walk that opened it), never by a path resolved again from /:
// a Prolog runs this as root. Only a regular file is removed.
func removeConsumed(ref string) error {
	abs, err := abspath.Abs(ref)
	if err != nil {
		return err
	}
	last, err := trustpath.For(trustpath.Shared).Walk(abs)
	if err != nil {
		return err
	}
	defer last.Close()
	if !last.Exists {
		return nil
	}
	if last.Node.Type() != unix.S_IFREG {
		return fmt.Errorf("it is no longer a regular file; left alone")
	}
	if err := unix.Unlinkat(last.Dir.FD, last.Dir.Name(last.Name), 0); err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "unlink", Path: last.Path(), Err: err}
	}
	return nil
}

// consumedRecord returns the stage name recorded for ref if this job
// consumed it (whether or not that stage still exists).
func consumedRecord(stageDir, ref string, getenv func(string) string) (name string, ok bool) {
	key, err := ConsumedKey(ref, getenv)
	if err != nil {
		return "", false
	}
	target, err := os.Readlink(filepath.Join(stageDir, aliasDirName, key))
	if err != nil {
		return "", false
	}
	name = filepath.Base(target)
	if target != filepath.Join("..", name) || !isSHA256Digest(strings.Replace(name, "-", ":", 1)) {
		return "", false // not written by us
	}
	return name, true
}

// errConsumedGone: the job consumed ref, and its stage is gone since.
func errConsumedGone(ref, name string) error {
	return fmt.Errorf("%s was consumed earlier in this job (stage --consume) and its stage %s has been removed since; within a job a consumed path is never read again (another user could have put a file there): copy the image to the node again under a new name", ref, name)
}

// consumedImage stands for a consumed image whose stage is published: Stage
// finds sha256-<hex> and never materializes.
type consumedImage struct{ name string }

func (c consumedImage) Digest() string { return strings.Replace(c.name, "-", ":", 1) }
func (c consumedImage) Materialize(context.Context, string) error {
	return fmt.Errorf("the stage %s of a consumed image was removed; copy the image to the node again", c.name)
}

// A broadcast record says that a job's launcher has already copied an
// image to every node of the job (the Slurm plugin's --dlbundle-bcast:
// sbcast to a per-job name): the job's later steps skip the copy, so the
// shared file system is read once per job. It lives in the stage dir of the
// host the launcher runs on (srun's), as an alias of the job
// (job-<id>.bcast-<64 hex>), so gc --job removes it with the job's other
// records; plain gc keeps it (it names no stage, and is not dangling).

// isBcastAlias reports whether an alias name is a broadcast record.
func isBcastAlias(name string) bool {
	i := strings.LastIndex(name, ".bcast-")
	return strings.HasPrefix(name, "job-") && i > 0 && isSHA256Digest("sha256:"+name[i+len(".bcast-"):])
}

func bcastKey(job, dest string) string {
	h := sha256.Sum256([]byte("dlbundle-bcast-v1\x00" + dest + "\x00" + job))
	return AliasJobPrefix(job) + "bcast-" + hex.EncodeToString(h[:])
}

// Broadcasted says whether job's record in stageDir says dest was copied
// to every node of the job already.
func Broadcasted(stageDir, job, dest string) bool {
	fi, err := os.Lstat(filepath.Join(stageDir, aliasDirName, bcastKey(job, dest)))
	return err == nil && fi.Mode()&os.ModeSymlink != 0
}

// RecordBroadcast writes job's record that dest is on every node of the
// job (after the copy succeeded).
func RecordBroadcast(stageDir, job, dest string) error {
	return writeAlias(stageDir, bcastKey(job, dest), "bcast")
}

// LockBroadcast takes job's broadcast lock in stageDir, a file among the
// job's aliases (gc --job removes it with them): one step of the job copies
// at a time, and a second that started meanwhile (srun & srun &) finds the
// first one's record instead of failing on the name it is writing.
func LockBroadcast(stageDir, job string) (unlock func(), err error) {
	aliasDir := filepath.Join(stageDir, aliasDirName)
	if err := os.Mkdir(aliasDir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("create %s: %w", aliasDir, err)
	}
	name := filepath.Join(aliasDir, AliasJobPrefix(job)+"bcast.lock")
	fd, err := unix.Open(name, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "flock", Path: name, Err: err}
	}
	return func() { unix.Close(fd) }, nil
}

// BcastCopyDir and BcastCopyPrefix name the node-local copies the Slurm
// plugin's --dlbundle-bcast has sbcast write, one per job, user and image:
// /tmp/dlbundle-bcast-<uid>.<job>-<16 hex>.dlimg (launchers/slurm's
// bcast_name makes the same name).
const BcastCopyDir = "/tmp"

func BcastCopyPrefix(uid int, job string) string {
	return fmt.Sprintf("dlbundle-bcast-%d.%s-", uid, job)
}

// RemoveBcastCopies removes, at the end of a job (gc --job, as the job's
// user), the copies sbcast left on this node for the job that no step
// consumed (a node of the job that ran no step with the image). Only the
// caller's own regular files are removed, by name in /tmp's descriptor:
// in the sticky /tmp a name the caller does not own cannot be unlinked by
// it anyway, and a link is never followed. It returns how many went.
func RemoveBcastCopies(job string) (int, error) {
	fd, err := unix.Open(BcastCopyDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: BcastCopyDir, Err: err}
	}
	d := os.NewFile(uintptr(fd), BcastCopyDir)
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return 0, err
	}
	prefix, uid := BcastCopyPrefix(os.Getuid(), job), uint32(os.Getuid())
	n := 0
	for _, name := range names {
		if !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, ".dlimg") {
			continue
		}
		var st unix.Stat_t
		if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Uid != uid {
			continue
		}
		if unix.Unlinkat(fd, name, 0) == nil {
			n++
		}
	}
	return n, nil
}

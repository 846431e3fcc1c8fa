package materialize

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/stagetime"
	"github.com/dlbundle/dlbundle/loader/stagefmt"
	"github.com/dlbundle/dlbundle/squash"
)

// Source is what a stage is made from; *image.Image satisfies it.
type Source interface {
	Entries() []image.Entry
	Extract(ctx context.Context, dir string, opts image.ExtractOptions) error
}

// Options tune Materialize.
type Options struct {
	Workers  int                     // parallel extraction; 0 = all cores
	Progress func(done, total int64) // extraction progress in bytes, or nil
}

// Materialize lays out a complete stage in dir (a fresh private temp dir that
// the caller renames into place afterwards): the extracted tree, the lookup
// table (which holds the listings the shim serves), the shim objects and
// this node's ld.so search rules. Nothing written depends on dir's final
// name. It creates what the image holds and few more objects (docs/loader.md,
// "Mirrored directories").
//
// What depends on the entries only (the table) or on the node only (the
// shim objects, and the probe of the node's ld.so, two processes) is done
// while the image is extracted, beside the decode workers: the first rank
// of a node waits for the slowest of them, not for their sum
// (docs/bench/firstrank.md).
func Materialize(ctx context.Context, src Source, dir string, opts Options) (err error) {
	stop := stagetime.Start("materialize: arch and cost checks")
	if err := checkImageArch(src); err != nil { // arch.go
		return err
	}
	entries := src.Entries()
	if err := checkStageCost(dir, entries); err != nil {
		return err
	}
	stop()
	root := filepath.Join(dir, stagefmt.RootDir)
	if err := os.Mkdir(root, 0o755); err != nil {
		return fmt.Errorf("materialize: %w", err)
	}
	// Nothing started here may still write into dir once Materialize has
	// returned (the caller removes dir on failure): on every way out, the
	// side tasks are cancelled on failure and waited for.
	sideCtx, cancel := context.WithCancel(ctx)
	var table *tableFile
	tableDone := make(chan error, 1)
	probeDone := make(chan probeResult, 1)
	defer func() {
		if err != nil {
			cancel()
			if tableDone != nil {
				<-tableDone
			}
			if probeDone != nil {
				<-probeDone
			}
			if table != nil {
				table.close()
			}
		}
		cancel()
	}()
	// The lookup table depends on the entries only; the shim objects on
	// nothing of the image, and the node's ld.so search rules on the node
	// only (the probe lists the shim's audit.so, written first).
	go func() {
		defer stagetime.Worker()()
		var err error
		table, err = writeTable(sideCtx, dir, entries)
		tableDone <- err
	}()
	go func() {
		stop := stagetime.Start("shim objects written (beside extract)")
		err := stagefmt.WriteShimObjects(filepath.Join(dir, stagefmt.ShimDir))
		stop()
		if err != nil {
			probeDone <- probeResult{shimErr: err}
			return
		}
		stop = stagetime.Start("ld.so search rules (probe: a process, beside extract)")
		rules, err := nodeSearchRules(sideCtx, dir)
		stop()
		probeDone <- probeResult{rules: rules, err: err}
	}()
	// The first bytes of every file as it is written tell which are ELF
	// objects of this node's class and machine (the table's FlagELFNode):
	// no file is opened again to read them back.
	var nodeELF sync.Map
	onHead := func(e *image.Entry, head []byte) {
		switch e.Kind { // the kinds the table flags FlagELF (stagefmt.EncodeTable)
		case image.KindELFExec, image.KindELFShared, image.KindPyExtension:
		default:
			return
		}
		if stagefmt.IsNodeELF(head) {
			nodeELF.Store(e.Path, true)
		}
	}
	stop = stagetime.Start("extract (all)")
	err = src.Extract(ctx, root, image.ExtractOptions{Workers: opts.Workers, Progress: opts.Progress, OnHead: onHead})
	stop()
	stop = stagetime.Start("table: wait after extract")
	tableErr := <-tableDone
	tableDone = nil
	stop()
	if err != nil {
		return fmt.Errorf("materialize: extract image into %s: %w", root, err)
	}
	if tableErr != nil {
		return tableErr
	}
	if err := ctx.Err(); err != nil { // SIGTERM during the extraction: no app
		return fmt.Errorf("materialize: %w", err)
	}
	stop = stagetime.Start("mark node ELF objects (from the decoded bytes)")
	err = table.markNodeELF(func(p string) bool { _, ok := nodeELF.Load(p); return ok })
	stop()
	if err != nil {
		return err
	}
	stop = stagetime.Start("relativize symlinks")
	err = relativizeSymlinks(ctx, root, entries)
	stop()
	if err != nil {
		return err
	}
	stop = stagetime.Start("shim and ld.so probe: wait")
	probe := <-probeDone
	probeDone = nil
	stop()
	if probe.shimErr != nil {
		return probe.shimErr
	}
	// After relativizeSymlinks: these read the staged libc and ld.so
	// through the stage's own symlinks, which must point inside the stage
	// by then. Each parses one ELF object of the image with debug/elf,
	// independently of the others: they run at once. None writes the
	// table (the search rules go into it after them).
	libcDone := make(chan error, 3)
	go func() {
		// Which preload build this node's processes load.
		stop := stagetime.Start("preload choice (the staged libc's versions)")
		defer stop()
		libcDone <- stagefmt.RecordPreload(filepath.Join(dir, stagefmt.ShimDir))
	}()
	var reals []byte
	go func() {
		// Where the real functions lie in the libc the stage serves (none:
		// the preload looks them all up); only with the node's rules.
		if probe.err == nil {
			stop := stagetime.Start("reals: where libc's functions lie")
			reals = stagefmt.FormatReals(dir)
			stop()
		}
		libcDone <- nil
	}()
	go func() {
		// Whether the image's glibc is the node's: compared by the ld.so
		// build ids, read as data (the image's ld.so only ever runs inside
		// the user's own process, started by exec). Decided once here,
		// not per process.
		stop := stagetime.Start("ld.so choice (build ids)")
		defer stop()
		_, err := stagefmt.WriteLdsoChoice(dir)
		libcDone <- err
	}()
	for range 3 {
		if e := <-libcDone; e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		return err
	}
	stop = stagetime.Start("search rules written")
	err = writeSearchRules(dir, probe, reals, stagefmt.CacheAnswerNames(entries))
	stop()
	if err != nil {
		return err
	}
	// A driver library of the node that the image's glibc cannot load
	// would stop the app at its load, after it started: say so now.
	if err := stagefmt.CheckNodeBound(dir, nodeBoundPaths(entries), squash.NodeCacheLookup()); err != nil {
		return err
	}
	// The directories ld.so may probe: named by the rules just found.
	defer stagetime.Start("mirror probed dirs")()
	return mirrorProbedDirs(ctx, root, entries, probedNames(dir))
}

// tableFile is the lookup table as written: the file still open, so that
// the flags learnt during extraction are set in place (it is created 0444;
// the descriptor that created it may still write).
type tableFile struct {
	f   *os.File
	tab []byte
}

func (t *tableFile) close() { t.f.Close() }

// markNodeELF sets FlagELFNode on the entries isNode names, in the file,
// and closes it.
func (t *tableFile) markNodeELF(isNode func(path string) bool) error {
	defer t.close()
	marks, err := stagefmt.MarkNodeELFIn(t.tab, isNode)
	if err != nil {
		return fmt.Errorf("materialize: mark ELF objects: %w", err)
	}
	for _, off := range marks {
		if _, err := t.f.WriteAt(t.tab[off:off+1], off); err != nil {
			return fmt.Errorf("materialize: mark ELF objects in %s: %w", t.f.Name(), err)
		}
	}
	if err := t.f.Close(); err != nil {
		return fmt.Errorf("materialize: write lookup table: %w", err)
	}
	return nil
}

// writeTable writes the lookup table and returns it, still open.
func writeTable(ctx context.Context, dir string, entries []image.Entry) (*tableFile, error) {
	if err := ctx.Err(); err != nil { // SIGTERM, a job's time limit: end before the table
		return nil, fmt.Errorf("materialize: %w", err)
	}
	t0 := stagetime.Now()
	tab, err := stagefmt.EncodeTable(entries)
	stagetime.Since("table: encode (beside extract)", t0, int64(len(tab)))
	if err != nil {
		return nil, err
	}
	t0 = stagetime.Now()
	defer stagetime.Since("table: write (beside extract)", t0, int64(len(tab)))
	name := filepath.Join(dir, stagefmt.TableFile)
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return nil, fmt.Errorf("materialize: write lookup table: %w", err)
	}
	if _, err := f.Write(tab); err != nil {
		f.Close()
		return nil, fmt.Errorf("materialize: write lookup table: %w", err)
	}
	return &tableFile{f: f, tab: tab}, nil
}

// relativizeSymlinks rewrites absolute symlink targets in the staged tree so
// that they resolve inside it: the kernel then never leaves the stage when ld.so
// opens <stage>/root + an original path that crosses a symlink.
func relativizeSymlinks(ctx context.Context, root string, entries []image.Entry) error {
	for _, e := range entries {
		if e.Type != image.TypeSymlink || !strings.HasPrefix(e.Target, "/") {
			continue
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("materialize: %w", err)
		}
		link := filepath.Join(root, e.Path)
		rel, err := filepath.Rel(filepath.Dir(e.Path), filepath.Clean(e.Target))
		if err != nil {
			return fmt.Errorf("materialize: symlink %s -> %s: %w", e.Path, e.Target, err)
		}
		if cur, err := os.Readlink(link); err != nil || !strings.HasPrefix(cur, "/") {
			continue // not extracted (e.g. under another symlink) or already relative
		}
		tmp := link + ".dlbundle-tmp"
		_ = os.Remove(tmp)
		if err := os.Symlink(rel, tmp); err != nil {
			return fmt.Errorf("materialize: symlink %s: %w", link, err)
		}
		if err := os.Rename(tmp, link); err != nil {
			return fmt.Errorf("materialize: symlink %s: %w", link, err)
		}
	}
	return nil
}

// mirrorProbedDirs creates an empty directory in the staged tree for every
// name in a bundled directory's listing that is a directory the image does
// not bundle and that ld.so may probe as (part of) a search subdirectory:
// names holds those names (probedNames). ld.so searches staged directories
// (LD_LIBRARY_PATH entries mapped by loader.ShimEnv, $ORIGIN of a staged object)
// with each subdirectory of this node's rules, and after a candidate fails
// there it stats the subdirectory to decide whether to search it again: a
// subdirectory that exists natively must exist in the stage, or later
// searches would skip it. Other listed directories need nothing on disk:
// the table lists them (docs/loader.md, "Mirrored directories").
func mirrorProbedDirs(ctx context.Context, root string, entries []image.Entry, names map[string]bool) error {
	for _, e := range entries {
		if e.Type != image.TypeDir {
			continue
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("materialize: %w", err)
		}
		var missing []string
		for _, c := range e.Listing {
			if c.Type == image.TypeDir && names[c.Name] { // stagefmt.EncodeTable has refused invalid names
				missing = append(missing, c.Name)
			}
		}
		if len(missing) > 0 {
			if err := mkdirsIn(ctx, filepath.Join(root, e.Path), missing); err != nil {
				return fmt.Errorf("materialize: directory %s: %w", e.Path, err)
			}
		}
	}
	return nil
}

// probedFallback: the subdirectory names glibc's ld.so has probed below
// search directories (hwcaps levels since 2.33, legacy tls/, platform and
// hwcap names until 2.36), for a node whose rules are unknown (glibc < 2.33:
// no STAGE/search).
var probedFallback = []string{"glibc-hwcaps", "x86-64-v2", "x86-64-v3", "x86-64-v4", "tls", "x86_64",
	"haswell", "xeon_phi", "avx512_1", "i686", "sse2", "aarch64", "atomics", "power9", "power10", "z13", "z14", "z15", "z16"}

// probedNames returns the names of the search subdirectories' components in
// stage dir's rules (STAGE/search: "cap glibc-hwcaps/x86-64-v3/" gives
// glibc-hwcaps and x86-64-v3), or probedFallback without rules.
func probedNames(dir string) map[string]bool {
	names := map[string]bool{}
	rules, err := os.ReadFile(filepath.Join(dir, stagefmt.SearchFile))
	if err != nil {
		for _, n := range probedFallback {
			names[n] = true
		}
		return names
	}
	for _, l := range strings.Split(string(rules), "\n") {
		if sub, ok := strings.CutPrefix(l, "cap "); ok {
			for _, c := range strings.Split(sub, "/") {
				if c != "" && c != "." && c != ".." {
					names[c] = true
				}
			}
		}
	}
	return names
}

// mkdirsIn creates the empty directories names in parent, an extracted
// directory whose mode and times the extraction has already set. A
// read-only directory (mode 0555, as in a Nix store or a locked-down
// install) is made writable for the owner meanwhile: without that, a stager
// that is not root cannot create them (root passes permission checks, which
// is why only unprivileged users saw it fail). Afterwards the parent gets
// back its mode and times (a mkdir changes its mtime).
func mkdirsIn(ctx context.Context, parent string, names []string) error {
	var st unix.Stat_t
	if err := unix.Lstat(parent, &st); err != nil {
		return err
	}
	mode := st.Mode & 0o7777
	locked := mode&0o300 != 0o300 // the owner may not write or search it
	if locked {
		if err := unix.Chmod(parent, mode|0o700); err != nil {
			return err
		}
	}
	made := false
	var err error
	for k, name := range names {
		if k%4096 == 4095 && ctx.Err() != nil {
			err = ctx.Err()
			break
		}
		e := unix.Mkdir(filepath.Join(parent, name), 0o755)
		if e == nil {
			made = true
		} else if !errors.Is(e, unix.EEXIST) {
			err = fmt.Errorf("mkdir %s: %w", name, e)
			break
		}
	}
	if made {
		times := []unix.Timespec{st.Atim, st.Mtim}
		if e := unix.UtimesNanoAt(unix.AT_FDCWD, parent, times, unix.AT_SYMLINK_NOFOLLOW); e != nil && err == nil {
			err = e
		}
	}
	if locked {
		if e := unix.Chmod(parent, mode); e != nil && err == nil {
			err = e
		}
	}
	return err
}

// nodeBoundPaths are the driver libraries the image records and leaves on
// the node (squash.NodeBound): external entries of those names.
func nodeBoundPaths(entries []image.Entry) []string {
	var out []string
	for _, e := range entries {
		if e.Type == image.TypeExternal && squash.NodeBound(e.Path) {
			out = append(out, e.Path)
		}
	}
	return out
}

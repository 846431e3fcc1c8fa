package loader

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/image"
)

// Source is what a stage is made from; *image.Image satisfies it.
type Source interface {
	Entries() []image.Entry
	Extract(ctx context.Context, dir string, opts image.ExtractOptions) error
}

// MaterializeOptions tune Materialize.
type MaterializeOptions struct {
	Workers  int                     // parallel extraction; 0 = all cores
	Progress func(done, total int64) // extraction progress in bytes, or nil
}

// Materialize lays out a complete stage in dir (a fresh private temp dir that
// the caller renames into place afterwards): the extracted tree, the lookup
// table (which holds the listings the shim serves), the shim objects and
// this node's ld.so search rules. Nothing written depends on dir's final
// name. It creates what the image holds and few more objects (docs/loader.md,
// "Mirrored directories").
func Materialize(ctx context.Context, src Source, dir string, opts MaterializeOptions) error {
	if err := checkImageArch(src); err != nil { // arch.go
		return err
	}
	entries := src.Entries()
	if err := checkStageCost(dir, entries); err != nil {
		return err
	}
	root := filepath.Join(dir, stageRootDir)
	if err := os.Mkdir(root, 0o755); err != nil {
		return fmt.Errorf("materialize: %w", err)
	}
	// The lookup table depends on the entries only: it is built while the
	// image is extracted (docs/bench/stage.md).
	side := make(chan error, 1)
	go func() { side <- writeTable(ctx, dir, entries) }()
	err := src.Extract(ctx, root, image.ExtractOptions{Workers: opts.Workers, Progress: opts.Progress})
	sideErr := <-side
	if err != nil {
		return fmt.Errorf("materialize: extract image into %s: %w", root, err)
	}
	if sideErr != nil {
		return sideErr
	}
	if err := ctx.Err(); err != nil { // SIGTERM during the extraction: no shim, no app
		return fmt.Errorf("materialize: %w", err)
	}
	if err := relativizeSymlinks(ctx, root, entries); err != nil {
		return err
	}
	// After relativizeSymlinks: writeSearchRules first marks the staged ELF
	// objects (markNodeELF), opening them through the stage's own symlinks,
	// which must point inside the stage by then. Its probe runs the node's
	// ld.so, not one the image bundles.
	if err := writeShim(filepath.Join(dir, stageShimDir)); err != nil {
		return err
	}
	if err := writeSearchRules(ctx, dir); err != nil { // runs the node's ld.so on the shim just written
		return err
	}
	// The directories ld.so may probe: named by the rules just found.
	return mirrorProbedDirs(ctx, root, entries, probedNames(dir))
}

// writeTable writes the lookup table.
func writeTable(ctx context.Context, dir string, entries []image.Entry) error {
	if err := ctx.Err(); err != nil { // SIGTERM, a job's time limit: end before the table
		return fmt.Errorf("materialize: %w", err)
	}
	tab, err := encodeTable(entries)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, stageTable), tab, 0o444); err != nil {
		return fmt.Errorf("materialize: write lookup table: %w", err)
	}
	return nil
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
// (LD_LIBRARY_PATH entries mapped by ShimEnv, $ORIGIN of a staged object)
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
			if c.Type == image.TypeDir && names[c.Name] { // encodeTable has refused invalid names
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
	rules, err := os.ReadFile(filepath.Join(dir, stageSearch))
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

// EnvOptions say how the shim reports and logs.
type EnvOptions struct {
	Report string // DLBUNDLE_REPORT file, or "" for none
	Debug  bool   // DLBUNDLE_DEBUG=1
}

// Environment variables that the shim reads.
const (
	EnvStage  = "DLBUNDLE_STAGE"
	EnvReport = "DLBUNDLE_REPORT"
	EnvDebug  = "DLBUNDLE_DEBUG"
	// EnvNativeEnv holds the app's own LD_LIBRARY_PATH entry verbatim
	// ("LD_LIBRARY_PATH=..."), when ShimEnv maps it to the stage, and
	// EnvMappedEnv the mapped entry: the shim points environ at the app's
	// entry before any constructor runs, and passes the mapped one on to
	// children that inherit the app's value.
	EnvNativeEnv = "DLBUNDLE_NATIVE_ENV"
	EnvMappedEnv = "DLBUNDLE_MAPPED_ENV"
	// EnvDirty lists the directories (newline-separated) that a process
	// wrote into, for its children (read-your-writes, docs/loader.md). ShimEnv
	// gives it an empty slot that the shim points at its own live copy; a
	// value inherited from an outer exec is kept.
	EnvDirty = "DLBUNDLE_DIRTY"
)

// ShimEnv returns environ with the loader set for the published stage at
// stageDir (its final path, after the rename): LD_AUDIT and LD_PRELOAD name the
// shim objects (existing entries are kept after them), DLBUNDLE_STAGE the stage.
func ShimEnv(stageDir string, environ []string, opts EnvOptions) []string {
	shim := filepath.Join(stageDir, stageShimDir)
	set := map[string]string{
		"LD_AUDIT":   filepath.Join(shim, shimAuditName),
		"LD_PRELOAD": filepath.Join(shim, preloadFor(stageDir)),
		EnvStage:     stageDir,
	}
	if opts.Report != "" {
		if abs, err := AbsPath(opts.Report); err == nil { // no stat of the (shared) cwd
			set[EnvReport] = abs
		} else {
			set[EnvReport] = opts.Report
		}
	}
	if opts.Debug {
		set[EnvDebug] = "1"
	}
	native, hasLLP := nativeLibraryPath(environ)
	if hasLLP {
		mapped := mapLibraryPath(stageDir, native)
		set["LD_LIBRARY_PATH"] = mapped // also takes an outer stage's mapping off
		if mapped != native {
			set[EnvNativeEnv] = "LD_LIBRARY_PATH=" + native
			set[EnvMappedEnv] = "LD_LIBRARY_PATH=" + mapped
		}
	}
	set[EnvDirty] = ""
	out := make([]string, 0, len(environ)+len(set))
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		if k == EnvNativeEnv || k == EnvMappedEnv {
			continue // ours (an exec under exec): set again below, or dropped
		}
		nv, ok := set[k]
		if !ok {
			out = append(out, kv)
			continue
		}
		if k == EnvDirty {
			set[k] = v // what an outer process wrote into stays written
			continue
		}
		if k == "LD_LIBRARY_PATH" {
			out = append(out, k+"="+nv) // in place: the app may walk environ
			delete(set, k)
			continue
		}
		if k == "LD_AUDIT" || k == "LD_PRELOAD" {
			switch {
			case v == "":
			case strings.Contains(v, nv): // already ours (an exec under exec)
				nv = v
			default:
				nv += ":" + v
			}
		}
		set[k] = nv
	}
	for _, k := range []string{"LD_AUDIT", "LD_PRELOAD", EnvStage, EnvReport, EnvDebug, EnvNativeEnv, EnvMappedEnv, EnvDirty} {
		if v, ok := set[k]; ok {
			out = append(out, k+"="+v)
		}
	}
	return out
}

// nativeLibraryPath returns the app's own LD_LIBRARY_PATH from environ: under
// an exec that was itself started by the shim, the value in environ is mapped
// to the outer stage, and that mapping is taken off again.
func nativeLibraryPath(environ []string) (string, bool) {
	var llp, oldStage string
	has := false
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "LD_LIBRARY_PATH":
			llp, has = v, true
		case EnvStage:
			oldStage = v
		}
	}
	if !has || oldStage == "" {
		return llp, has
	}
	prefix := oldStage + "/" + stageRootDir // as the shim forms it
	dirs := strings.Split(llp, ":")
	for i, d := range dirs {
		if strings.HasPrefix(d, prefix+"/") {
			dirs[i] = strings.TrimPrefix(d, prefix)
		}
	}
	return strings.Join(dirs, ":"), true
}

// mapLibraryPath maps every LD_LIBRARY_PATH entry that names a directory the
// stage bundles to its staged copy (stage root + the entry as given). ld.so
// then makes its own probes of those directories and their hwcaps
// subdirectories (it stats the directory of a failed candidate, a call no
// audit module sees) on the node-local stage instead of the shared file
// system; the audit module maps each candidate back to its original for the
// table lookup and l_name. Entries that are relative, empty, hold dynamic
// string tokens ($ORIGIN) or are not bundled directories stay as they are.
func mapLibraryPath(stageDir, llp string) string {
	if llp == "" || strings.Contains(llp, ";") {
		return llp // ';' also separates entries for ld.so: leave such values alone
	}
	tab, release, err := mapStageTable(stageDir)
	if err != nil {
		return llp
	}
	defer release()
	root := stageDir + "/" + stageRootDir // as the shim forms it from DLBUNDLE_STAGE
	dirs := strings.Split(llp, ":")
	for i, d := range dirs {
		if !strings.HasPrefix(d, "/") || strings.Contains(d, "$") {
			continue
		}
		if _, typ, ok := resolveEntry(tab, filepath.Clean(d)); ok && typ == tabDir {
			dirs[i] = root + d
		}
	}
	return strings.Join(dirs, ":")
}

// StagedPath tells whether the command path original (absolute, or relative
// to the cwd) is a bundled ELF executable of the stage at stageDir, and
// returns its staged copy (stage root + the path as given: symlinks inside
// the stage resolve as the originals do). Scripts: see StagedScript.
func StagedPath(stageDir, original string) (string, bool) {
	abs, err := AbsPath(original)
	if err != nil {
		return "", false
	}
	tab, release, err := mapStageTable(stageDir)
	if err != nil {
		return "", false
	}
	defer release()
	final, ok := resolveInTable(tab, abs)
	if !ok || !isELF(filepath.Join(stageDir, stageRootDir, final)) {
		return "", false
	}
	return filepath.Join(stageDir, stageRootDir, abs), true
}

// StagedScript tells whether the command path original (absolute) is a
// bundled executable "#!" script of the stage at stageDir, and returns its
// interpreter and optional argument as the kernel parses the line (first
// 256 bytes; the rest of the line after the interpreter, blanks trimmed, is
// one argument). exec then starts the interpreter itself, with the script's
// original path in argv as the kernel would, so that a bundled interpreter
// runs from the stage and nothing is looked up on the original tree.
func StagedScript(stageDir, original string) (interp, arg string, ok bool) {
	tab, release, err := mapStageTable(stageDir)
	if err != nil {
		return "", "", false
	}
	defer release()
	final, ok := resolveInTable(tab, original)
	if !ok {
		return "", "", false
	}
	if ent, found := tableFind(tab, final); !found || ent.Mode&0o111 == 0 {
		return "", "", false
	}
	f, err := os.Open(filepath.Join(stageDir, stageRootDir, final))
	if err != nil {
		return "", "", false
	}
	defer f.Close()
	buf := make([]byte, 256)
	n, _ := io.ReadFull(f, buf)
	return parseShebang(buf[:n])
}

// parseShebang parses a "#!" line as Linux's binfmt_script does; ok is false
// when there is none or the kernel would have to decide (no newline within
// its 256-byte buffer).
func parseShebang(b []byte) (interp, arg string, ok bool) {
	line, _, found := bytes.Cut(b, []byte("\n"))
	if !found || !bytes.HasPrefix(line, []byte("#!")) {
		return "", "", false
	}
	rest := strings.TrimLeft(string(line[2:]), " \t")
	interp = rest
	if i := strings.IndexAny(rest, " \t"); i >= 0 {
		interp, arg = rest[:i], strings.Trim(rest[i:], " \t")
	}
	if interp == "" || strings.ContainsRune(interp, 0) {
		return "", "", false
	}
	return interp, arg, true
}

// resolveInTable follows the table's symlinks along p (as execve would,
// like the shim's resolver) and returns the bundled regular file it names.
// Anything the table cannot decide is "not bundled".
func resolveInTable(tab []byte, p string) (string, bool) {
	final, typ, ok := resolveEntry(tab, p)
	return final, ok && typ == tabReg
}

// resolveEntry follows the table's symlinks along p and returns the bundled
// regular file or directory it names with its table type; ok is false when
// the table cannot decide (or p names anything else).
func resolveEntry(tab []byte, p string) (final string, typ uint8, ok bool) {
	rest := strings.Split(strings.TrimPrefix(p, "/"), "/")
	var out []string // resolved components
	links := 0
	last := uint8(0)
	if t, _, found := tableLookup(tab, "/"); found {
		last = t
	}
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(out) > 0 {
				// Only a directory the table knows may be popped.
				if typ, _, ok := tableLookup(tab, "/"+strings.Join(out, "/")); !ok || typ != tabDir {
					return "", 0, false
				}
				out = out[:len(out)-1]
				last = tabDir
			}
			continue
		}
		out = append(out, c)
		cur := "/" + strings.Join(out, "/")
		typ, _, ok := tableLookup(tab, cur)
		last = typ
		switch {
		case !ok || typ == tabExternal:
			if len(rest) == 0 {
				return "", 0, false
			}
		case typ == tabReg:
			return cur, tabReg, len(rest) == 0
		case typ == tabSymlink:
			if links++; links > 40 {
				return "", 0, false
			}
			t, _ := tableTarget(tab, cur)
			out = out[:len(out)-1]
			if strings.HasPrefix(t, "/") {
				out = nil
			}
			rest = append(strings.Split(t, "/"), rest...)
			last = tabSymlink
		case typ == tabMissing:
			return "", 0, false
		}
	}
	if last != tabDir {
		return "", 0, false
	}
	return "/" + strings.Join(out, "/"), tabDir, true
}

func isELF(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	var m [4]byte
	_, err = f.ReadAt(m[:], 0)
	return err == nil && string(m[:]) == "\x7fELF"
}

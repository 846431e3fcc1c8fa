package materialize

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/loader/stagefmt"
)

// The shim answers a library search of ld.so as a whole (audit.c,
// la_objsearch at LA_SER_ORIG) and so must know the two things of ld.so's
// search that depend on the node, not on the image: the subdirectories it
// probes below every search directory (glibc-hwcaps/x86-64-v{4,3,2} as far as
// this CPU supports them, legacy tls/ and platform ones until glibc 2.36), in
// ld.so's order, and the default (system) directories. Both are compiled into
// or computed by the node's ld.so; the stage records what the node's ld.so
// itself prints for a search that cannot succeed, in STAGE/search:
//
//	dlbundle-search 1
//	cap glibc-hwcaps/x86-64-v4/      (one line per subdirectory, in order;
//	...                               the last is "cap " = the directory itself)
//	dir /lib/x86_64-linux-gnu        (one line per default directory, in order)
//
// No file: the shim answers per candidate as before (correct, but ld.so then
// stats the search directories itself).
//
// Nothing of the image runs: the rules come from the node's own ld.so (the
// PT_INTERP path of this architecture on the node, a root-owned regular file
// not writable by others), run with an environment of our own
// (probeSearchRules), and are kept per node in the stage dir
// (ldsearch-<key>), so a cold stage of the next image runs nothing at all.

// interpreter is the node's ld.so (the PT_INTERP of every dynamically linked
// program of this architecture).
var interpreter = stagefmt.DynamicLinker()

const (
	// searchCachePrefix names the node's rules kept in the stage dir:
	// ldsearch-<32 hex digits of searchKey>.
	searchCachePrefix = "ldsearch-"
	// probeLibrary is the name the probe of an ld.so without --help asks it
	// to preload: no file can have it (too long), so ld.so prints its whole
	// search for it (LD_LIBRARY_PATH with every subdirectory, the cache, then
	// the system directories, each with every subdirectory) and finds
	// nothing.
	probeLibrary = "libdlbundle-ldso-probe-" + probeFill + ".so"
	probeFill    = "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" +
		"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" +
		"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" +
		"xxxxxxxxxxxxxxxxxxxxxxxxxx" // 242 bytes: the name is 268, over NAME_MAX (255)
	// probeDir is the LD_LIBRARY_PATH of that probe, relative to the stage
	// being written (the probe's working directory; a stage dir may hold
	// ':', which would split an absolute one). It is never created.
	probeDir = ".ldprobe"
)

// probeResult is what nodeSearchRules found, run beside the extraction.
type probeResult struct {
	rules   []byte
	err     error // the probe's: the stage goes on without rules
	shimErr error // writing the shim objects first failed: staging fails
}

// writeSearchRules writes STAGE/search after extraction: this node's rules
// (probe: from the stage dir's record of them or else from a probe of the
// node's ld.so, run meanwhile), then where the real functions lie in the
// stage's libc (reals: stagefmt.FormatReals). A probe that failed leaves no
// file (the shim falls back) and says why.
func writeSearchRules(dir string, probe probeResult, reals []byte, cacheNames []string) error {
	if probe.err != nil {
		fmt.Fprintf(os.Stderr, "dlbundle: ld.so search rules unknown (%v); ld.so will probe search directories itself\n", probe.err)
		return nil
	}
	// The node's ld.so.cache answers for the image's libraries, in what
	// room the rules and the real functions' places leave (and the NUL).
	cache := stagefmt.FormatCacheAnswers(cacheNames, stagefmt.SearchRoom-1-len(probe.rules)-len(reals))
	rules := append(append(slices.Clip(probe.rules), cache...), reals...)
	if err := os.WriteFile(filepath.Join(dir, stagefmt.SearchFile), rules, 0o444); err != nil {
		return fmt.Errorf("materialize: write search rules: %w", err)
	}
	// The shim reads them from the table it maps anyway (STAGE/search stays
	// for dlbundle's own readers, such as probedNames).
	return stagefmt.WriteSearch(dir, rules)
}

// nodeSearchRules returns this node's rules for the stage being written in
// dir: kept in the stage dir (dir's parent) under the key of what decides
// them, or probed and then kept there.
func nodeSearchRules(ctx context.Context, dir string) ([]byte, error) {
	ldso, st, err := nodeLdso()
	if err != nil {
		return nil, err
	}
	defer ldso.Close()
	env := ldProbeEnv(os.Environ())
	keep := filepath.Join(filepath.Dir(dir), searchCachePrefix+searchKey(&st, env))
	if rules := readKeptRules(keep); rules != nil {
		return rules, nil
	}
	var rules []byte
	// A freshly written executable can be briefly busy (ETXTBSY: a child
	// forked meanwhile by another goroutine still holds audit.so open for
	// writing): retry.
	for try := 0; try < 3; try++ {
		if rules, err = probeSearchRules(ctx, ldso, dir, env); err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return nil, err
	}
	keepRules(keep, rules)
	return rules, nil
}

// nodeLdso opens the node's ld.so (the kernel follows the node's symlinks;
// nothing of the image is looked at: an image decides nothing that runs) and
// checks what it opened: a regular file owned by root (or by the stager: a
// private install runs nothing of anyone else's) and not writable by group
// or others. The probe runs that very file (through /proc/self/fd), so it
// cannot be swapped between the check and the run. (The directories on the
// way are the node's /lib: whoever can write there owns every program on
// the node already.)
func nodeLdso() (*os.File, unix.Stat_t, error) {
	var st unix.Stat_t
	if interpreter == "" {
		return nil, st, fmt.Errorf("no ld.so known for %s", runtime.GOARCH)
	}
	f, err := os.OpenFile(interpreter, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, st, fmt.Errorf("this node's ld.so: %w", err)
	}
	err = unix.Fstat(int(f.Fd()), &st)
	switch {
	case err != nil:
		err = fmt.Errorf("this node's ld.so %s: %w", interpreter, err)
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		err = fmt.Errorf("this node's ld.so %s is not a regular file; not run", interpreter)
	case st.Uid != 0 && int(st.Uid) != os.Geteuid():
		err = fmt.Errorf("this node's ld.so %s is owned by uid %d, not root; not run", interpreter, st.Uid)
	case st.Mode&0o022 != 0:
		err = fmt.Errorf("this node's ld.so %s has mode %#o (writable by others); not run", interpreter, st.Mode&0o7777)
	}
	if err != nil {
		f.Close()
		return nil, st, err
	}
	return f, st, nil
}

// ldProbeEnv is the probe's whole environment, apart from what it sets itself:
// the stager's settings that change ld.so's list of subdirectories and
// nothing else. They are the same as the app's when the job's first rank
// stages (a Prolog has none): GLIBC_TUNABLES reduced to glibc.cpu.hwcaps
// (CPU features masked, which lowers the glibc-hwcaps level) and
// glibc.cpu.hwcap_mask, and LD_HWCAP_MASK (legacy hwcap subdirectories,
// glibc <= 2.36). They are part of the key of the kept rules.
func ldProbeEnv(environ []string) []string {
	var env []string
	for _, kv := range environ {
		switch k, v, _ := strings.Cut(kv, "="); k {
		case "GLIBC_TUNABLES":
			var keep []string
			for _, t := range strings.Split(v, ":") {
				if name, _, _ := strings.Cut(t, "="); name == "glibc.cpu.hwcaps" || name == "glibc.cpu.hwcap_mask" {
					keep = append(keep, t)
				}
			}
			if len(keep) > 0 {
				env = append(env, "GLIBC_TUNABLES="+strings.Join(keep, ":"))
			}
		case "LD_HWCAP_MASK":
			env = append(env, kv)
		}
	}
	sort.Strings(env)
	return env
}

// searchKey names what decides the rules: the node's ld.so (which glibc, and
// how it was built: device, inode, size, mtime and ctime), the CPU's features
// (the kernel's hwcaps and platform from the auxiliary vector, and the flags
// /proc/cpuinfo shows for the first CPU: x86-64 glibc reads CPUID itself) and
// the probe's environment. A change of any gives another key, hence a probe.
func searchKey(ld *unix.Stat_t, env []string) string {
	h := sha256.New()
	// 2: rules kept by earlier versions may hold what a stager's
	// environment forged (the probe once inherited it): not reused.
	fmt.Fprintf(h, "dlbundle-ldsearch 2\x00%s\x00%d %d %d %d.%d %d.%d\x00", runtime.GOARCH,
		ld.Dev, ld.Ino, ld.Size, ld.Mtim.Sec, ld.Mtim.Nsec, ld.Ctim.Sec, ld.Ctim.Nsec)
	h.Write(auxvHwcaps())
	h.Write([]byte{0})
	h.Write(cpuFlags())
	for _, kv := range env {
		fmt.Fprintf(h, "\x00%s", kv)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// auxvHwcaps returns the AT_HWCAP and AT_HWCAP2 entries of this process's
// auxiliary vector (what the kernel tells ld.so of the CPU; the platform
// string follows from them and the architecture); nothing when /proc is not
// there.
func auxvHwcaps() []byte {
	const atHwcap, atHwcap2 = 16, 26 // <linux/auxvec.h>, all architectures
	auxv, err := os.ReadFile("/proc/self/auxv")
	if err != nil {
		return nil
	}
	var out []byte
	for i := 0; i+16 <= len(auxv); i += 16 {
		if t := binary.NativeEndian.Uint64(auxv[i:]); t == atHwcap || t == atHwcap2 {
			out = append(out, auxv[i:i+16]...)
		}
	}
	return out
}

// cpuFlags returns the first "flags" (x86) or "Features" (arm64) line of
// /proc/cpuinfo, reading no more than the first CPU's block; nothing when
// /proc is not there (then the key rests on the ld.so and the environment).
func cpuFlags() []byte {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	buf := make([]byte, 16<<10)
	n, _ := io.ReadFull(f, buf)
	for _, line := range bytes.Split(buf[:n], []byte("\n")) {
		if bytes.HasPrefix(line, []byte("flags")) || bytes.HasPrefix(line, []byte("Features")) {
			return line
		}
	}
	return nil
}

// readKeptRules returns the rules kept at path, or nil when there are none
// we can trust: the stage dir must be the stager's own and not writable by
// others (node.OpenStageDir makes it so), the file a regular one of the stager's,
// not writable by others, and in the format the probe writes.
func readKeptRules(path string) []byte {
	if !privateDir(filepath.Dir(path)) {
		return nil
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() ||
		st.Mode&0o022 != 0 || st.Size >= stagefmt.MaxSearchRules {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(f, stagefmt.MaxSearchRules))
	if err != nil || stagefmt.CheckSearchRules(b) != nil {
		return nil
	}
	return b
}

// keepRules records rules at path for the next cold stage (temp file and
// rename: a reader sees all or nothing; a temp file left by a crash is
// removed by the next stager, as tmp.* is). Best effort: without it the next
// cold stage probes again.
func keepRules(path string, rules []byte) {
	dir := filepath.Dir(path)
	if !privateDir(dir) {
		return
	}
	f, err := os.CreateTemp(dir, "tmp.ldsearch-")
	if err != nil {
		return
	}
	_, err = f.Write(rules)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o444)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
}

// privateDir reports whether dir is a directory owned by this user that no
// one else can write into.
func privateDir(dir string) bool {
	var st unix.Stat_t
	return unix.Lstat(dir, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR &&
		int(st.Uid) == os.Geteuid() && st.Mode&0o022 == 0
}

// probeSearchRules asks the node's ld.so (ldso, checked by nodeLdso) for its
// rules. It runs "ld.so --list STAGE/shim/audit.so" with LD_DEBUG=libs, whose
// output lists the subdirectories ld.so probes, in order, on the
// "(LD_LIBRARY_PATH)" line of a search, and the default directories on the
// "(system search path)" line. --list runs nothing (no initializer of any
// object), and audit.so has no DT_NEEDED.
//
// glibc >= 2.33: "ld.so --help" names the default directories, and the
// search is LD_PRELOAD=audit.so with LD_LIBRARY_PATH=shim (relative to the
// stage being written: its path may hold ':'), which finds audit.so there
// after every subdirectory: nothing outside the stage is looked up. Older
// glibc (2.31, Debian 11) has no --help: the search is for a name no file
// can have (probeLibrary, longer than NAME_MAX) in LD_LIBRARY_PATH=probeDir
// (never created), which prints the system search path too; its open fails
// with ENAMETOOLONG in the first default directory that exists, where ld.so
// ends the search (glibc elf/dl-load.c open_path: an error other than
// ENOENT, EACCES, ENOTDIR), so ld.so looks up that directory's
// subdirectories once. The rules are kept per node (nodeSearchRules).
func probeSearchRules(ctx context.Context, ldso *os.File, dir string, env []string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// The file nodeLdso checked, as the child's fd 3; without /proc (a bare
	// chroot), its path.
	path := "/proc/self/fd/3"
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		path = ldso.Name()
	}
	run := func(env []string, args ...string) (stdout, stderr string, err error) {
		cmd := exec.CommandContext(ctx, path, args...)
		cmd.ExtraFiles = []*os.File{ldso}
		cmd.Dir = dir
		// Never nil: exec.Cmd gives a nil Env the stager's whole
		// environment (LD_PRELOAD, GLIBC_TUNABLES, secrets), and an
		// LD_LIBRARY_PATH entry holding "(system search path)\n" then
		// forged a line of --help's output and of the kept rules.
		cmd.Env = append([]string{}, env...)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		if err := cmd.Run(); err != nil {
			return "", "", fmt.Errorf("%s %s: %w: %s", ldso.Name(), args[0], err, firstLine(e.String()))
		}
		return o.String(), e.String(), nil
	}
	audit := filepath.Join(dir, stagefmt.ShimDir, stagefmt.AuditObject)
	if help, _, err := run(nil, "--help"); err == nil {
		if dirs := helpSystemDirs(help); len(dirs) > 0 {
			_, debug, err := run(append([]string{"LD_DEBUG=libs", "LD_LIBRARY_PATH=" + stagefmt.ShimDir,
				"LD_PRELOAD=" + stagefmt.AuditObject}, env...), "--list", audit)
			if err != nil {
				return nil, err
			}
			caps, err := parseSubdirs(debug, stagefmt.ShimDir)
			if err != nil {
				return nil, err
			}
			return stagefmt.FormatSearchRules(caps, dirs)
		}
	}
	_, debug, err := run(append([]string{"LD_DEBUG=libs", "LD_LIBRARY_PATH=" + probeDir,
		"LD_PRELOAD=" + probeLibrary}, env...), "--list", audit)
	if err != nil {
		return nil, err
	}
	return parseSearchRules(debug, probeDir)
}

// helpSystemDirs returns the directories "ld.so --help" (glibc >= 2.33)
// names as "(system search path)": lines "  /dir (system search path)",
// the directory absolute, without spaces (the probe's environment is
// empty, so no LD_LIBRARY_PATH entry of the stager's can print such a line;
// this is a second guard).
func helpSystemDirs(help string) []string {
	var dirs []string
	for _, line := range strings.Split(help, "\n") {
		if d, ok := strings.CutSuffix(strings.TrimSpace(line), " (system search path)"); ok && strings.HasPrefix(d, "/") && !strings.ContainsAny(d, " \t") {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	if len(l) > 200 {
		l = l[:200] + "..."
	}
	return l
}

// parseSearchRules turns ld.so's LD_DEBUG=libs output of a search of
// LD_LIBRARY_PATH=llp that went on to the system directories into the
// STAGE/search text.
func parseSearchRules(debug, llp string) ([]byte, error) {
	caps, err := parseSubdirs(debug, llp)
	if err != nil {
		return nil, err
	}
	var system []string
	for _, line := range strings.Split(debug, "\n") {
		if list, ok := searchPath(line, "(system search path)"); ok {
			system = strings.Split(list, ":")
			break
		}
	}
	// The system path is each default directory with every subdirectory,
	// in the same order, ending with the directory itself.
	if len(system) == 0 || len(system)%len(caps) != 0 {
		return nil, fmt.Errorf("ld.so's system search path %q does not list %d subdirectories per directory", system, len(caps))
	}
	var dirs []string
	for i := 0; i < len(system); i += len(caps) {
		d := system[i+len(caps)-1]
		for j, c := range caps {
			if system[i+j] != strings.TrimSuffix(d+"/"+c, "/") {
				return nil, fmt.Errorf("system search path entry %q is not %s/%s", system[i+j], d, c)
			}
		}
		dirs = append(dirs, d)
	}
	return stagefmt.FormatSearchRules(caps, dirs)
}

// parseSubdirs returns the subdirectories ("glibc-hwcaps/x86-64-v3/", ...,
// "" for the directory itself) of the first search of LD_LIBRARY_PATH=llp in
// ld.so's LD_DEBUG=libs output.
func parseSubdirs(debug, llp string) ([]string, error) {
	var list string
	found := false
	for _, line := range strings.Split(debug, "\n") {
		if list, found = searchPath(line, "(LD_LIBRARY_PATH)"); found {
			break
		}
	}
	if !found {
		return nil, errors.New("ld.so printed no search of LD_LIBRARY_PATH (LD_DEBUG=libs unsupported?)")
	}
	cands := strings.Split(list, ":")
	caps := make([]string, len(cands))
	for i, d := range cands {
		if d != llp && !strings.HasPrefix(d, llp+"/") {
			return nil, fmt.Errorf("unexpected probe candidate %q", d)
		}
		c := strings.TrimPrefix(strings.TrimPrefix(d, llp), "/")
		if c != "" {
			c += "/"
		}
		if (c == "") != (i == len(cands)-1) {
			return nil, fmt.Errorf("ld.so's subdirectory list %q does not end with the directory itself", cands)
		}
		caps[i] = c
	}
	return caps, nil
}

// searchPath returns the list of a "search path=LIST\t\t(SOURCE)" line of
// LD_DEBUG=libs whose source is source.
func searchPath(line, source string) (string, bool) {
	_, rest, ok := strings.Cut(line, "search path=")
	if !ok {
		return "", false
	}
	list, src, _ := strings.Cut(rest, "\t")
	return list, strings.Contains(src, source)
}

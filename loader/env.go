package loader

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/dlbundle/dlbundle/internal/abspath"
	"github.com/dlbundle/dlbundle/loader/stagefmt"
)

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
	// EnvLdso is set when the stage's image glibc is not the node's
	// (stagefmt.LdsoChoice): "<glibc version> <staged ld.so>". The shim then
	// starts bundled children under that ld.so and gives processes that
	// run under the node's ld.so the node's glibc (docs/exec.md, "Images
	// and nodes").
	EnvLdso = "DLBUNDLE_LDSO"
	// EnvExe names the program a process started under the image's ld.so
	// runs (/proc/self/exe names ld.so there).
	EnvExe       = "DLBUNDLE_EXE"
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
	shim := filepath.Join(stageDir, stagefmt.ShimDir)
	set := map[string]string{
		"LD_AUDIT":   filepath.Join(shim, stagefmt.AuditObject),
		"LD_PRELOAD": filepath.Join(shim, stagefmt.PreloadFor(stageDir)),
		EnvStage:     stageDir,
	}
	if opts.Report != "" {
		if abs, err := abspath.Abs(opts.Report); err == nil { // no stat of the (shared) cwd
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
	if v, ok := ldsoEnv(stageDir); ok {
		set[EnvLdso] = v
	}
	set[EnvDirty] = ""
	out := make([]string, 0, len(environ)+len(set))
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		if k == EnvNativeEnv || k == EnvMappedEnv || k == EnvLdso || k == EnvExe {
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
	for _, k := range []string{"LD_AUDIT", "LD_PRELOAD", EnvStage, EnvReport, EnvDebug, EnvNativeEnv, EnvMappedEnv, EnvLdso, EnvDirty} {
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
	prefix := oldStage + "/" + stagefmt.RootDir // as the shim forms it
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
	tab, release, err := stagefmt.MapTable(stageDir)
	if err != nil {
		return llp
	}
	defer release()
	root := stageDir + "/" + stagefmt.RootDir // as the shim forms it from DLBUNDLE_STAGE
	dirs := strings.Split(llp, ":")
	for i, d := range dirs {
		if !strings.HasPrefix(d, "/") || strings.Contains(d, "$") {
			continue
		}
		if _, typ, ok := stagefmt.Resolve(tab, filepath.Clean(d)); ok && typ == stagefmt.TabDir {
			dirs[i] = root + d
		}
	}
	return strings.Join(dirs, ":")
}

// ldsoEnv is EnvLdso's value for the stage, from its LdsoChoice record; ok
// false on a node whose ld.so is the image's (no record: one failed readlink).
func ldsoEnv(stageDir string) (string, bool) {
	text, err := os.Readlink(filepath.Join(stageDir, stagefmt.LdsoChoice))
	if err != nil {
		return "", false
	}
	version, p, found := strings.Cut(text, " ")
	if !found || !strings.HasPrefix(p, "/") || strings.ContainsAny(version, " /") {
		return "", false
	}
	return version + " " + filepath.Join(stageDir, stagefmt.RootDir, p), true
}

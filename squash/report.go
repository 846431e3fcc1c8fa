package squash

import (
	"sort"
	"strings"
)

// Reasons a traced path is not bundled. They are the keys of Report.Skipped.
const (
	ReasonPseudoFS      = "pseudo file system (/proc, /sys, /dev)"
	ReasonTempDir       = "temporary or runtime directory (/tmp, /var/tmp, /run; --include PREFIX to bundle)"
	ReasonEtc           = "node-local configuration (/etc; --include /etc to bundle)"
	ReasonGlibcInternal = "read by glibc internally, out of a preload's reach (locale data, iconv configuration); node-local system files"
	ReasonUserCache     = "per-user cache ($HOME/.cache, $XDG_CACHE_HOME: each user's and run's own; --include PREFIX to bundle)"
	ReasonUserExclude   = "excluded by --exclude"
	ReasonWritten       = "written, created or removed during the pilot"
	ReasonChanged       = "changed since the pilot (size or mtime differ; --allow-changed to bundle the current file)"
	ReasonVanished      = "vanished since the pilot"
	ReasonAppeared      = "did not exist during the pilot but exists now"
	ReasonStalePyc      = "bytecode cache written by the pilot does not match its source now"
	ReasonDirChanged    = "directory whose listing changed during the pilot"
	ReasonMissingKept   = "failed lookup not kept (its directory is not in the plan)"
	ReasonOtherError    = "failed lookup with an error other than ENOENT/ENOTDIR (not reproduced)"
	ReasonUnreadable    = "cannot be read at build time"
	ReasonStatOnlyLarge = "only stat'd by the pilot and larger than 2 MiB (external: stats go to the file system; --stat-only-max SIZE to bundle)"
	ReasonPerRun        = "per-run temporary name (a JVM's, Open MPI's session files...: each run makes its own)"
	ReasonNewer         = "named only by a run's reports and modified after the image or pilot (an output of the run; --allow-changed to bundle)"
)

// Report says what Build did with the traced paths, for the build summary.
type Report struct {
	Traces     int      // traces merged
	Incomplete []string // traces without an end record (pilot cut short)
	Events     int      // event records read
	Paths      int      // distinct paths in the events

	// Skipped counts traced paths by the reason they are not bundled
	// (Reason* constants). Excluded paths still get an external entry.
	Skipped map[string]int
	// SkippedUnder counts the paths a default prefix rule left out by the
	// --include prefix that would bundle them (IncludePrefix), per reason:
	// "/tmp/pynamic-build" with 34 paths tells the user what to type.
	SkippedUnder map[string]map[string]int
	// Changed lists paths that changed since the pilot: left out, or bundled
	// as they are now with Options.AllowChanged.
	Changed []string
	// Vanished lists paths that existed during the pilot and do not now.
	Vanished []string
	// OutputDirs lists directories in which the pilot created or removed
	// names: they get no entry (their files may still be bundled).
	OutputDirs []string
	// ListingsChanged lists directories whose names differ from the listing
	// the pilot read (other than by the pilot's own writes).
	ListingsChanged []string
	// PycCaches lists bytecode caches the pilot wrote and the plan bundles
	// because they are valid for their sources now.
	PycCaches []string
	// NodeBound lists the driver libraries recorded and not bundled
	// (ReasonNodeBound): the node's copy is loaded at run time.
	NodeBound []string
	// Newer lists the paths left out as ReasonNewer.
	Newer []string
	// Warnings repeats every message given to Options.Warn.
	Warnings []string
}

func (r *Report) skip(reason string) {
	if r.Skipped == nil {
		r.Skipped = map[string]int{}
	}
	r.Skipped[reason]++
}

func (r *Report) skipUnder(reason, prefix string) {
	if prefix == "" {
		return
	}
	if r.SkippedUnder == nil {
		r.SkippedUnder = map[string]map[string]int{}
	}
	if r.SkippedUnder[reason] == nil {
		r.SkippedUnder[reason] = map[string]int{}
	}
	r.SkippedUnder[reason][prefix]++
}

// PrefixCount is an --include prefix and how many traced paths it holds.
type PrefixCount struct {
	Prefix string
	Paths  int
}

// SkippedPrefixes returns the --include prefixes of the paths left out for
// reason, most paths first.
func (r *Report) SkippedPrefixes(reason string) []PrefixCount {
	var out []PrefixCount
	for p, n := range r.SkippedUnder[reason] {
		out = append(out, PrefixCount{p, n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Paths != out[j].Paths {
			return out[i].Paths > out[j].Paths
		}
		return out[i].Prefix < out[j].Prefix
	})
	return out
}

// SkippedReasons returns the reasons of Skipped, most frequent first.
func (r *Report) SkippedReasons() []string {
	var rs []string
	for k := range r.Skipped {
		rs = append(rs, k)
	}
	sort.Slice(rs, func(i, j int) bool {
		if r.Skipped[rs[i]] != r.Skipped[rs[j]] {
			return r.Skipped[rs[i]] > r.Skipped[rs[j]]
		}
		return rs[i] < rs[j]
	})
	return rs
}

// IncludePrefix names the prefix to give build's --include so that p, which
// a default rule leaves out (a temporary or runtime directory), is bundled
// with the tree it belongs to: the rule's prefix and the next component of
// p ("/tmp/pynamic-build" for "/tmp/pynamic-build/lib/libx.so"), or p itself
// when it is the rule's prefix. It returns "" when no default rule leaves p
// out, or when the rule cannot be overridden (pseudo file systems).
func IncludePrefix(p string) string {
	best := rule{}
	for _, r := range defaultRules {
		if hasPrefix(p, r.prefix) && len(r.prefix) > len(best.prefix) {
			best = r
		}
	}
	if best.prefix == "" || best.verdict == Bundle || best.reason == ReasonPseudoFS {
		return ""
	}
	rest := strings.TrimPrefix(p[len(best.prefix):], "/")
	if rest == "" {
		return best.prefix
	}
	next, _, _ := strings.Cut(rest, "/")
	return best.prefix + "/" + next
}

// RulesOfBuild returns the rules an image was built with, from the build
// information it records ("include" and "exclude": the prefixes joined by
// ':'), so that readers of what ran from it (dlbundle report) tell the
// paths it left out by policy from the paths its pilot did not take.
func RulesOfBuild(info map[string]string) (*Rules, error) {
	split := func(s string) []string {
		if s == "" {
			return nil
		}
		return strings.Split(s, ":")
	}
	return NewRules(split(info["include"]), split(info["exclude"]))
}

// PerRunName returns the pattern of a temporary name that a run makes for
// itself ("/tmp/ompi.*" for /tmp/ompi.node1.0/..., "/tmp/.java_pid*"), or
// "": the component below the temporary directory decides, by the names
// runtimes are known to make (JVM, Open MPI, PMIx, Python's
// multiprocessing and tempfile, systemd, Slurm).
func PerRunName(p string) string {
	for _, dir := range []string{"/tmp", "/var/tmp", "/run", "/dev/shm"} {
		rest, ok := strings.CutPrefix(p, dir+"/")
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(rest, "/")
		for _, pre := range []string{"hsperfdata_", ".java_pid", "ompi.", "openmpi-sessions-", "prterun.", "pmix", "pymp-", "systemd-private-", "slurm"} {
			if strings.HasPrefix(name, pre) {
				return dir + "/" + pre + "*"
			}
		}
		// Python's tempfile names: tmp + 8 random characters. (Not any name
		// with digits in it: an app built under /tmp/build-12345 is the
		// user's to --include.)
		if len(name) == 11 && strings.HasPrefix(name, "tmp") {
			return dir + "/tmp*"
		}
		return ""
	}
	return ""
}

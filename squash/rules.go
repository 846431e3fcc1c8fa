package squash

import (
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
)

// Verdict is what the prefix rules say about a path.
type Verdict int

const (
	// Bundle: the path may be bundled (subject to the rest of the policy).
	Bundle Verdict = iota
	// Exclude: the path exists for the app but is node-local (e.g. /etc): it is
	// recorded as an external entry (lookups pass through), never bundled.
	Exclude
	// Skip: pseudo file systems and temporary directories: no entry at all.
	Skip
)

// rule is one prefix and its verdict; the longest matching prefix wins.
type rule struct {
	prefix  string
	verdict Verdict
	reason  string
	user    bool // from --include/--exclude
}

// Default rules. Pseudo file systems can never be included: their content
// is made up by the kernel per process and per node.
var defaultRules = []rule{
	{prefix: "/proc", verdict: Skip, reason: ReasonPseudoFS},
	{prefix: "/sys", verdict: Skip, reason: ReasonPseudoFS},
	{prefix: "/dev", verdict: Skip, reason: ReasonPseudoFS},
	{prefix: "/run", verdict: Skip, reason: ReasonTempDir},
	{prefix: "/tmp", verdict: Skip, reason: ReasonTempDir},
	{prefix: "/var/tmp", verdict: Skip, reason: ReasonTempDir},
	{prefix: "/etc", verdict: Exclude, reason: ReasonEtc},
	// glibc opens its locale data and iconv configuration with internal
	// calls (__open_nocancel) that no LD_PRELOAD shim can see, so bundling
	// them would save nothing: the ranks read them natively anyway. They
	// are system files, node-local on compute nodes like /etc.
	{prefix: "/usr/lib/locale", verdict: Exclude, reason: ReasonGlibcInternal},
	{prefix: "/usr/share/locale/locale.alias", verdict: Exclude, reason: ReasonGlibcInternal},
}

// gconvConfigDirs are where glibc's iconv looks for gconv-modules and its
// cache (Debian multiarch and the RHEL/SUSE layouts); the modules themselves
// are dlopen'ed through ld.so and stay bundled.
var gconvConfigDirs = []string{
	"/usr/lib/x86_64-linux-gnu/gconv", "/usr/lib/aarch64-linux-gnu/gconv",
	"/usr/lib/powerpc64le-linux-gnu/gconv", "/usr/lib64/gconv", "/usr/lib/gconv",
}

func init() {
	for _, d := range gconvConfigDirs {
		for _, f := range []string{"gconv-modules", "gconv-modules.cache", "gconv-modules.d"} {
			defaultRules = append(defaultRules, rule{prefix: d + "/" + f, verdict: Exclude, reason: ReasonGlibcInternal})
		}
	}
}

var pseudoFS = []string{"/proc", "/sys", "/dev"}

// userCaches are the per-user cache directories of the user who builds
// ($XDG_CACHE_HOME, else $HOME/.cache): what a program caches there (mesa's
// shader cache, pip's, fontconfig's) is the user's and changes with every
// run; bundled, it would be stale at once and reported as changed. Left out
// like /tmp (no entry: lookups go to the file system); --include brings a
// prefix back.
func userCaches() []string {
	var out []string
	if x := os.Getenv("XDG_CACHE_HOME"); path.IsAbs(x) && path.Clean(x) != "/" {
		out = append(out, path.Clean(x))
	}
	if h := os.Getenv("HOME"); path.IsAbs(h) && path.Clean(h) != "/" {
		out = append(out, path.Join(h, ".cache"))
	}
	return out
}

// Rules decides, by longest matching path prefix, whether a path may be bundled.
type Rules struct {
	rules []rule // sorted by descending prefix length
}

// NewRules combines the default rules with the user's --include and
// --exclude prefixes. A user rule replaces a default rule of the same prefix.
func NewRules(include, exclude []string) (*Rules, error) {
	byPrefix := map[string]rule{}
	for _, r := range defaultRules {
		byPrefix[r.prefix] = r
	}
	for _, c := range userCaches() {
		byPrefix[c] = rule{prefix: c, verdict: Skip, reason: ReasonUserCache}
	}
	add := func(p string, v Verdict, flag string) error {
		if !path.IsAbs(p) {
			return fmt.Errorf("%s %q: give an absolute path prefix such as /opt/app", flag, p)
		}
		p = path.Clean(p)
		if v == Bundle {
			for _, ps := range pseudoFS {
				if hasPrefix(p, ps) {
					return fmt.Errorf("--include %s: %s is a pseudo file system whose content the kernel makes up per process; it cannot be bundled", p, ps)
				}
			}
		}
		if old, ok := byPrefix[p]; ok && old.user && old.verdict != v {
			return fmt.Errorf("%s is given to both --include and --exclude; keep one", p)
		}
		reason := ReasonUserExclude
		if v == Bundle {
			reason = ""
		}
		byPrefix[p] = rule{prefix: p, verdict: v, reason: reason, user: true}
		return nil
	}
	for _, p := range include {
		if err := add(p, Bundle, "--include"); err != nil {
			return nil, err
		}
	}
	for _, p := range exclude {
		if err := add(p, Exclude, "--exclude"); err != nil {
			return nil, err
		}
	}
	rs := &Rules{}
	for _, r := range byPrefix {
		rs.rules = append(rs.rules, r)
	}
	sort.Slice(rs.rules, func(i, j int) bool {
		if len(rs.rules[i].prefix) != len(rs.rules[j].prefix) {
			return len(rs.rules[i].prefix) > len(rs.rules[j].prefix)
		}
		return rs.rules[i].prefix < rs.rules[j].prefix
	})
	return rs, nil
}

// Match returns the verdict for p and, unless it is Bundle, the reason.
func (rs *Rules) Match(p string) (Verdict, string) {
	for _, r := range rs.rules {
		if hasPrefix(p, r.prefix) {
			return r.verdict, r.reason
		}
	}
	return Bundle, ""
}

// Included reports whether the longest rule matching p is the user's
// --include (which overrides, e.g., the node-bound default, with a warning).
func (rs *Rules) Included(p string) bool {
	for _, r := range rs.rules {
		if hasPrefix(p, r.prefix) {
			return r.user && r.verdict == Bundle
		}
	}
	return false
}

// hasPrefix reports whether p is prefix or below it, component-wise
// (/usr/lib matches /usr/lib/x but not /usr/lib64).
func hasPrefix(p, prefix string) bool {
	if prefix == "/" {
		return true
	}
	return p == prefix || strings.HasPrefix(p, prefix) && p[len(prefix)] == '/'
}

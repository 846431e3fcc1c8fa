// Package version holds the dlbundle version string, recorded in every trace
// and image header and printed by --version.
package version

import "runtime/debug"

// Version is the dlbundle release. The Makefile stamps it at link time
// (-ldflags -X); a plain `go install` or `go build` of a git checkout gets
// the commit Go records in the binary (vcs.revision, "-dirty" when the work
// tree had changes), so both say which source they were built from. "dev"
// only when neither is known (a build outside any checkout).
var Version = "dev"

func init() {
	if Version == "dev" {
		Version = fromBuildInfo(debug.ReadBuildInfo())
	}
}

// fromBuildInfo is the version of a binary built without -X: the first 12
// hex digits of the commit, as `git rev-parse --short=12` prints it.
func fromBuildInfo(bi *debug.BuildInfo, ok bool) string {
	if !ok {
		return "dev"
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "dev"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

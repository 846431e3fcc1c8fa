package version

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	bi := func(kv ...string) *debug.BuildInfo {
		b := &debug.BuildInfo{}
		for i := 0; i < len(kv); i += 2 {
			b.Settings = append(b.Settings, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return b
	}
	for _, c := range []struct {
		info *debug.BuildInfo
		ok   bool
		want string
	}{
		{bi("vcs.revision", "a9ba5ff023be5d3872ff3364a24b1136ee56049b", "vcs.modified", "false"), true, "a9ba5ff023be"},
		{bi("vcs.revision", "a9ba5ff023be5d3872ff3364a24b1136ee56049b", "vcs.modified", "true"), true, "a9ba5ff023be-dirty"},
		{bi("-trimpath", "true"), true, "dev"}, // built outside a checkout, or -buildvcs=false
		{nil, false, "dev"},
	} {
		if got := fromBuildInfo(c.info, c.ok); got != c.want {
			t.Errorf("%v: %q, want %q", c.info, got, c.want)
		}
	}
}

package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestFrom(t *testing.T) {
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want Info
	}{
		{"no build info", nil, false, Info{Version: "unknown", Revision: "unknown", GoVersion: runtime.Version()}},
		{"a checkout, modified", &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "4765cca0"}, {Key: "vcs.modified", Value: "true"}, {Key: "vcs.time", Value: "2026-12-03T12:00:00Z"},
		}}, true, Info{Version: "(devel)", Revision: "4765cca0", Modified: true, Time: "2026-12-03T12:00:00Z", GoVersion: "go1.26.1"}},
		{"go install at a version", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.2.3"}}, true,
			Info{Version: "v1.2.3", Revision: "unknown", GoVersion: "go1.26.0"}},
	} {
		got := from(tc.bi, tc.ok)
		tc.want.Platform = runtime.GOOS + "/" + runtime.GOARCH
		if got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
	if l := (Info{Revision: "abc", Modified: true}).RevisionLabel(); l != "abc-modified" {
		t.Errorf("label %q", l)
	}
}

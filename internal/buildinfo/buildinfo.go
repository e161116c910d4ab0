// Package buildinfo owns what a leaselog binary knows of its own build: the
// module version, the VCS revision it was built from, and the Go toolchain,
// as runtime/debug.ReadBuildInfo records them (no -ldflags needed). The
// version command prints it; the daemon exports it as leaselog_build_info.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"sync"
)

// Info is a binary's build.
type Info struct {
	Version   string // the main module's version: v1.2.3, a pseudo-version, or (devel)
	Revision  string // the VCS revision, or "unknown" (a test binary, a build outside a checkout)
	Modified  bool   // the checkout had uncommitted changes
	Time      string // the revision's commit time (RFC 3339), or ""
	GoVersion string // the toolchain: go1.26.0
	Platform  string // GOOS/GOARCH
}

// Get returns the running binary's build, read once.
var Get = sync.OnceValue(func() Info { return from(debug.ReadBuildInfo()) })

func from(bi *debug.BuildInfo, ok bool) Info {
	in := Info{Version: "unknown", Revision: "unknown", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if !ok {
		return in
	}
	if bi.Main.Version != "" {
		in.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		in.GoVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		case "vcs.time":
			in.Time = s.Value
		}
	}
	return in
}

// RevisionLabel is the revision as a label shows it: with "-modified" when
// the checkout had uncommitted changes.
func (in Info) RevisionLabel() string {
	if in.Modified {
		return in.Revision + "-modified"
	}
	return in.Revision
}

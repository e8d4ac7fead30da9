// Package version says which a2ad build is running: the module version Go
// recorded at build time (runtime/debug.ReadBuildInfo), or for a build
// from a checkout the VCS revision, and the Go toolchain.
package version

import (
	"runtime"
	"runtime/debug"
	"sync"
)

// Info is a build's identity.
type Info struct {
	// Version is the module version (v1.2.3, or a pseudo-version for
	// `go install …@commit`); for a build from a checkout ("(devel)"), the
	// VCS revision's first 12 hex digits, with "+dirty" when the tree had
	// uncommitted changes ("devel" when Go recorded no revision either,
	// e.g. `go test` or -buildvcs=false).
	Version string `json:"version"`
	// Revision is the full VCS revision (commit hash), "" when not known.
	Revision string `json:"revision,omitempty"`
	// Modified: the build's tree had uncommitted changes.
	Modified bool `json:"modified,omitempty"`
	// Go is the toolchain that built the binary (runtime.Version, e.g. go1.25.1).
	Go string `json:"go"`
}

var get = sync.OnceValue(func() Info { return fromBuildInfo(debug.ReadBuildInfo()) })

// Get is the running binary's Info (read once).
func Get() Info { return get() }

// String is the one-line form `a2ad --version` prints, e.g.
// "a2ad v1.2.3 (go1.25.1)" or "a2ad 0123456789ab+dirty (go1.25.1)".
func (i Info) String() string { return "a2ad " + i.Version + " (" + i.Go + ")" }

// fromBuildInfo is the Info of bi (ok false: no build information).
func fromBuildInfo(bi *debug.BuildInfo, ok bool) Info {
	info := Info{Version: "devel", Go: runtime.Version()}
	if !ok || bi == nil {
		return info
	}
	if bi.GoVersion != "" {
		info.Go = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	switch v := bi.Main.Version; {
	case v != "" && v != "(devel)":
		info.Version = v
	case info.Revision != "":
		info.Version = info.Revision[:min(12, len(info.Revision))]
		if info.Modified {
			info.Version += "+dirty"
		}
	}
	return info
}

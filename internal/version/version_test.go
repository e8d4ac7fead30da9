package version

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	cases := []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want Info
	}{
		{"released module", &debug.BuildInfo{GoVersion: "go1.25.1", Main: debug.Module{Version: "v1.4.0"}}, true,
			Info{Version: "v1.4.0", Go: "go1.25.1"}},
		{"checkout, clean", &debug.BuildInfo{GoVersion: "go1.25.1", Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "2774eb3f0d1c2b3a4e5f60718293a4b5c6d7e8f9"}, {Key: "vcs.modified", Value: "false"}}}, true,
			Info{Version: "2774eb3f0d1c", Revision: "2774eb3f0d1c2b3a4e5f60718293a4b5c6d7e8f9", Go: "go1.25.1"}},
		{"checkout, dirty", &debug.BuildInfo{GoVersion: "go1.25.1", Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "2774eb3f0d1c2b3a4e5f60718293a4b5c6d7e8f9"}, {Key: "vcs.modified", Value: "true"}}}, true,
			Info{Version: "2774eb3f0d1c+dirty", Revision: "2774eb3f0d1c2b3a4e5f60718293a4b5c6d7e8f9", Modified: true, Go: "go1.25.1"}},
		{"no revision", &debug.BuildInfo{GoVersion: "go1.25.1", Main: debug.Module{Version: "(devel)"}}, true,
			Info{Version: "devel", Go: "go1.25.1"}},
	}
	for _, c := range cases {
		if got := fromBuildInfo(c.bi, c.ok); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	if got := fromBuildInfo(nil, false); got.Version != "devel" || got.Go == "" {
		t.Errorf("no build info: %+v", got)
	}
	if s := (Info{Version: "v1.4.0", Go: "go1.25.1"}).String(); s != "a2ad v1.4.0 (go1.25.1)" {
		t.Errorf("String: %q", s)
	}
}

// Package buildinfo says which build of agentbus is running: the module version and the VCS
// revision the binary was built from. Every role reports the same value in its start-up banner,
// `--version`, `agentbus status` and the agentbus_build_info metric, so an operator can tell which
// processes of a cluster run which code.
//
// The values come from runtime/debug.ReadBuildInfo. A release build may override them with
//
//	go build -ldflags "-X github.com/agentbus/agentbus/pkg/buildinfo.version=v1.2.3 -X github.com/agentbus/agentbus/pkg/buildinfo.revision=abc123"
package buildinfo

import (
	"runtime/debug"
	"sync"
)

// Set by -ldflags -X; empty means "read it from the build info".
var (
	version  string
	revision string
)

// Info is what a binary knows of its own build.
type Info struct {
	Version   string // module version ("v0.3.1"), or "(devel)" for a build from a work tree
	Revision  string // VCS revision, shortened to 12 characters; "" when unknown
	Modified  bool   // the work tree had uncommitted changes
	GoVersion string
}

var (
	once sync.Once
	info Info
)

// Get returns this binary's build information. It never fails: unknown parts read "(devel)" or "".
func Get() Info {
	once.Do(func() { info = read() })
	return info
}

func read() Info {
	i := Info{Version: "(devel)"}
	if bi, ok := debug.ReadBuildInfo(); ok {
		i.GoVersion = bi.GoVersion
		if v := bi.Main.Version; v != "" {
			i.Version = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				i.Revision = s.Value
			case "vcs.modified":
				i.Modified = s.Value == "true"
			}
		}
	}
	if version != "" {
		i.Version = version
	}
	if revision != "" {
		i.Revision = revision
		i.Modified = false
	}
	if len(i.Revision) > 12 {
		i.Revision = i.Revision[:12]
	}
	return i
}

// String is the one-line form used in banners and `--version`: "v0.3.1 (abc123def456)",
// "(devel) (abc123def456, modified)", or just the version when the revision is unknown.
func (i Info) String() string {
	if i.Revision == "" {
		return i.Version
	}
	if i.Modified {
		return i.Version + " (" + i.Revision + ", modified)"
	}
	return i.Version + " (" + i.Revision + ")"
}

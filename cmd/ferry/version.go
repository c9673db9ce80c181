package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/ferrydev/ferry/internal/pluginclient"
	"github.com/ferrydev/ferry/sdk"
)

// versionInfo is what `ferry version` prints: the build and the plugin
// protocol versions this host and this SDK speak.
type versionInfo struct {
	Version  string `json:"version"`            // the module version, "(devel)" for a source build
	Revision string `json:"revision,omitempty"` // the VCS commit it was built from
	Modified bool   `json:"modified,omitempty"` // built from a tree with uncommitted changes
	Go       string `json:"go"`
	// HostProtocols are the plugin protocol versions the host drives;
	// SDKProtocols the ones a plugin built with this SDK serves.
	HostProtocols []int `json:"host_protocols"`
	SDKProtocols  []int `json:"sdk_protocols"`
}

// revision is the commit `make build` stamps in (-ldflags -X), for builds
// where Go's own VCS stamp is off (GOFLAGS=-buildvcs=false).
var revision string

func buildVersion() versionInfo {
	v := versionInfo{Version: "(unknown)", Revision: revision, Go: runtime.Version(), HostProtocols: pluginclient.HostVersions()}
	for p := sdk.MinProtocolVersion; p <= sdk.ProtocolVersion; p++ {
		v.SDKProtocols = append(v.SDKProtocols, p)
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v.Version = bi.Main.Version
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Revision = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	return v
}

func (v versionInfo) String() string {
	s := "ferry " + v.Version
	if v.Revision != "" {
		s += " (" + v.Revision
		if v.Modified {
			s += ", modified"
		}
		s += ")"
	}
	return s + fmt.Sprintf(", %s; plugin protocols: host %v, sdk %v", v.Go, v.HostProtocols, v.SDKProtocols)
}

func cmdVersion(args []string) error {
	fs := flag.NewFlagSet("version", flag.ExitOnError)
	asJSON := fs.Bool("json", false, "print a JSON object")
	fs.Parse(args)
	v := buildVersion()
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(v)
	}
	fmt.Println(v)
	return nil
}

package loader

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
)

var binDir string

// fixtures are the test plugins that live in testdata/.
var fixtures = map[string]string{
	"ferry-plugin-v99":   "github.com/ferrydev/ferry/host/loader/testdata/ferry-plugin-v99",
	"ferry-plugin-bloat": "github.com/ferrydev/ferry/host/loader/testdata/ferry-plugin-bloat",
}

func TestMain(m *testing.M) {
	build := plugintest.Main{Binaries: []string{"ferry-plugin-tcp"}, Extra: fixtures, CheckLeaks: true}
	os.Exit(build.Run(m, func(dir string) { binDir = dir }))
}

func TestStartGoodPlugin(t *testing.T) {
	path := filepath.Join(binDir, "ferry-plugin-tcp")
	sum, err := FileSHA256(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start(context.Background(), Spec{Name: "tcp", Path: path, SHA256: strings.ToUpper(sum)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Info.Name != "tcp" || p.Protocol != sdk.ProtocolVersion || p.SHA256 != sum || p.PID() <= 0 {
		t.Fatalf("plugin %+v: want tcp, protocol %d, sha256 %s and a pid", p, sdk.ProtocolVersion, sum)
	}
	// The capabilities arrive on the Plugin: TCP's MaxSlice is its default
	// max_frame before Start.
	if !slices.Equal(p.Info.Ops, []ring.Op{ring.OpWrite, ring.OpRead}) || p.Info.MaxSlice != 64<<20 || p.Info.PreferredSlice != 0 || p.Info.SameMachineOnly {
		t.Errorf("tcp's capabilities: %+v, want ops write and read, MaxSlice 64 MiB, no preferred slice, not same-machine-only", p.Info)
	}
	if p.Implements(sdk.InterfaceDrainer) {
		t.Errorf("tcp lists interfaces %q: it does not implement Drainer", p.Interfaces)
	}
	p.Kill()
	select {
	case <-p.Exited():
	default:
		t.Fatal("Exited not closed after Kill")
	}
	p.Kill() // twice is fine
}

func TestStartRefusals(t *testing.T) {
	notExec := filepath.Join(t.TempDir(), "ferry-plugin-noexec")
	os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644)
	cases := []struct {
		name string
		spec Spec
		want []string
	}{
		{"missing binary", Spec{Name: "rdma", Path: filepath.Join(binDir, "ferry-plugin-rdma")}, []string{`plugin "rdma"`, "ferry-plugin-rdma", "not found", "make build"}},
		{"wrong checksum", Spec{Name: "tcp", Path: filepath.Join(binDir, "ferry-plugin-tcp"), SHA256: strings.Repeat("ab", 32)}, []string{`plugin "tcp"`, "checksum mismatch", strings.Repeat("ab", 32)}},
		{"not executable", Spec{Name: "noexec", Path: notExec}, []string{"not executable"}},
		{"directory", Spec{Name: "dir", Path: binDir}, []string{"directory"}},
		{"future protocol", Spec{Name: "v99", Path: filepath.Join(binDir, "ferry-plugin-v99")}, []string{`plugin "v99"`, "ferry-plugin-v99", "unsupported protocol version", "speaks 1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := Start(context.Background(), c.spec, nil)
			if err == nil {
				p.Kill()
				t.Fatal("Start succeeded")
			}
			if !errors.Is(err, ErrPlugin) {
				t.Errorf("error %v does not wrap ErrPlugin", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// A plugin that speaks only a future version is refused with a typed
// error that names both sides' versions and what to upgrade; found
// without reading the error's text.
func TestStartFutureProtocol(t *testing.T) {
	p, err := Start(context.Background(), Spec{Name: "v99", Path: filepath.Join(binDir, "ferry-plugin-v99")}, nil)
	if err == nil {
		p.Kill()
		t.Fatal("Start of a protocol-99 plugin succeeded")
	}
	var verr *VersionError
	if !errors.As(err, &verr) {
		t.Fatalf("error %v: want a *VersionError", err)
	}
	if !slices.Equal(verr.PluginVersions, []int{99}) || !slices.Equal(verr.HostVersions, []int{1, 2}) {
		t.Errorf("versions: plugin %v, host %v; want [99] and [1 2]", verr.PluginVersions, verr.HostVersions)
	}
	for _, w := range []string{"protocol version 99", "this host speaks 1, 2", "upgrade Ferry"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
}

func TestResolve(t *testing.T) {
	cases := []struct{ name, path, dir, base, want string }{
		{"tcp", "", "/opt/ferry", "", "/opt/ferry/ferry-plugin-tcp"},
		{"tcp", "/x/p", "/opt/ferry", "/etc", "/x/p"},
		{"tcp", "rel/p", "/opt/ferry", "/etc/ferry", "/etc/ferry/rel/p"},
	}
	for _, c := range cases {
		if got := Resolve(c.name, c.path, c.dir, c.base); got != c.want {
			t.Errorf("Resolve(%q, %q, %q, %q) = %q, want %q", c.name, c.path, c.dir, c.base, got, c.want)
		}
	}
}

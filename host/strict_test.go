package host_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/sdk/plugintest"
)

// withMissingPlugin is the default config of an engine named name with one
// more plugin block, whose binary does not exist.
func withMissingPlugin(name string) *config.Config {
	cfg := config.Default(name)
	cfg.PluginDir = binDir
	cfg.Plugins = append(cfg.Plugins, config.Plugin{Name: "rdma", Enabled: true, DeclRange: "engine.hcl:9:1",
		Path: filepath.Join(binDir, "ferry-plugin-rdma-absent")})
	return cfg
}

// TestStrictRefusesAFailedPlugin: by default an engine whose enabled
// plugin cannot start does not start, and says which plugin, where its
// block is, why, and how to run without it.
func TestStrictRefusesAFailedPlugin(t *testing.T) {
	e, err := host.New(context.Background(), withMissingPlugin("strict-a"))
	if err == nil {
		e.Close()
		t.Fatal("an engine with a plugin that cannot start started")
	}
	if !errors.Is(err, host.ErrPluginFailed) {
		t.Errorf("error %v is not ErrPluginFailed", err)
	}
	for _, want := range []string{`plugin "rdma"`, "engine.hcl:9:1", "ferry-plugin-rdma-absent", "strict = false"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestNotStrictRunsDegraded: with strict = false the same engine starts on
// the plugins that run, reports the failed one, and says it is degraded.
func TestNotStrictRunsDegraded(t *testing.T) {
	cfg := withMissingPlugin("strict-b")
	cfg.SetStrict(false)
	var logs plugintest.LogBuffer
	e, err := host.New(context.Background(), cfg, host.WithLogger(hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn})))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	states := map[string]string{}
	for _, p := range e.Status(context.Background()).Plugins {
		states[p.Name] = p.State
	}
	if states["rdma"] != "failed" || states["tcp"] != "running" || states["shm"] != "running" {
		t.Errorf("plugin states %v: want rdma failed, tcp and shm running", states)
	}
	if !strings.Contains(logs.String(), "running degraded (strict = false)") || !strings.Contains(logs.String(), `plugin "rdma"`) {
		t.Errorf("log does not say the engine runs degraded without rdma:\n%s", logs.String())
	}
}

// TestStrictNeedsATransport: an engine none of whose plugins runs does not
// start, and says that no transport is usable.
func TestStrictNeedsATransport(t *testing.T) {
	cfg := config.Default("strict-c")
	cfg.PluginDir = t.TempDir() // holds no plugin binaries
	e, err := host.New(context.Background(), cfg)
	if err == nil {
		e.Close()
		t.Fatal("an engine with no usable transport started")
	}
	if !strings.Contains(err.Error(), "no transport is usable (2 plugins enabled, none running)") {
		t.Errorf("error %q does not say no transport is usable", err)
	}
}

// pinnedWrong is an engine file whose tcp plugin is pinned to a digest its
// binary does not have, and that does not set strict.
func pinnedWrong(name string) string {
	return `name = "` + name + `"
plugin_dir = "` + binDir + `"
metastore { kind = "none" }
plugin "tcp" {
  sha256 = "` + strings.Repeat("0", 64) + `"
  config { listen = ["127.0.0.1:0"] }
}
plugin "shm" {}
`
}

// TestStrictIsTheDefaultOfAFile: a file that does not set strict is
// strict, as the reference says: a pinned plugin whose binary does not
// match keeps the engine from starting, not running degraded on shm.
func TestStrictIsTheDefaultOfAFile(t *testing.T) {
	cfg, err := config.Parse([]byte(pinnedWrong("strict-d")), "strict-d.hcl")
	if err != nil {
		t.Fatal(err)
	}
	e, err := host.New(context.Background(), cfg)
	if err == nil {
		e.Close()
		t.Fatal("an engine whose file leaves strict out started with a plugin whose sha256 does not match its pin")
	}
	if !errors.Is(err, host.ErrPluginFailed) {
		t.Errorf("error %v is not ErrPluginFailed", err)
	}
	for _, want := range []string{`plugin "tcp"`, "strict-d.hcl:4:1", "sha256", "strict = false"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}

	// strict = false still runs it degraded.
	cfg, err = config.Parse([]byte("strict = false\n"+pinnedWrong("strict-e")), "strict-e.hcl")
	if err != nil {
		t.Fatal(err)
	}
	e, err = host.New(context.Background(), cfg, host.WithLogger(hclog.NewNullLogger()))
	if err != nil {
		t.Fatalf("strict = false: %v", err)
	}
	e.Close()
}

// TestStrictIsTheDefaultInGo: a Config built field by field, which never
// mentions Strict, is strict too: an engine none of whose plugins can run
// does not start.
func TestStrictIsTheDefaultInGo(t *testing.T) {
	cfg := &config.Config{
		Name:      "strict-f",
		PluginDir: t.TempDir(), // holds no plugin binaries
		Metastore: config.Metastore{Kind: config.MetastoreNone},
		Plugins:   []config.Plugin{{Name: "tcp", Enabled: true, DeclRange: "code"}},
		Transfer:  config.Default("strict-f").Transfer,
	}
	e, err := host.New(context.Background(), cfg)
	if err == nil {
		e.Close()
		t.Fatal("an engine of a Config that leaves Strict unset started with no usable transport")
	}
	if !strings.Contains(err.Error(), "no transport is usable") {
		t.Errorf("error %q does not say no transport is usable", err)
	}
}

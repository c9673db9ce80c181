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
	cfg.Strict = false
	var logs plugintest.LogBuffer
	e, err := host.New(context.Background(), cfg, host.WithLogger(hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn})))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	states := map[string]string{}
	for _, p := range e.Plugins(context.Background()) {
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

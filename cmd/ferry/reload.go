package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/loader"
)

// reloadOnHUP upgrades e's plugins live each time `ferry run` gets
// SIGHUP: it reads the config file again and, for every enabled plugin
// block whose binary (path, or sha256) differs from the one running,
// calls Engine.UpgradePlugin. Only plugin blocks' path and sha256 are
// reloaded; everything else in the file needs a restart. It returns the
// call that stops it and waits for it.
func reloadOnHUP(ctx context.Context, e *host.Engine, file string) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-hup:
			case <-ctx.Done():
				return
			}
			for _, line := range reloadPlugins(ctx, e, file) {
				fmt.Fprintln(os.Stderr, "ferry run: reload:", line)
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		cancel()
		wg.Wait()
	}
}

// reloadPlugins reads file again and upgrades each plugin whose binary
// changed; it returns one line per plugin it acted on (or why it could
// not read the file).
func reloadPlugins(ctx context.Context, e *host.Engine, file string) []string {
	cfg, err := loadConfig(file, e.Name(), "")
	if err != nil {
		return []string{fmt.Sprintf("%s not reloaded: %v", file, err)}
	}
	running := map[string]host.PluginStatus{}
	for _, st := range e.Status(ctx).Plugins {
		running[st.Name] = st
	}
	var out []string
	for _, pc := range cfg.Plugins {
		st, ok := running[pc.Name]
		if !pc.Enabled || !ok {
			continue
		}
		path := loader.Resolve(pc.Name, pc.Path, cfg.PluginDir, filepath.Dir(file))
		if path == st.Path && (pc.SHA256 == "" || strings.EqualFold(pc.SHA256, st.SHA256)) {
			continue
		}
		err := e.UpgradePlugin(ctx, host.PluginUpgrade{Name: pc.Name, Path: path, SHA256: pc.SHA256})
		if err != nil {
			out = append(out, fmt.Sprintf("plugin %q not upgraded (the old binary still serves): %v", pc.Name, err))
			continue
		}
		out = append(out, fmt.Sprintf("plugin %q upgraded to %s", pc.Name, path))
	}
	return out
}

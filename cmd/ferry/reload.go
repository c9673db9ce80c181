package main

import (
	"bytes"
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
// block whose binary (path, or sha256) or whose own `config { }` block
// differs from what runs, calls Engine.UpgradePlugin (a changed config
// alone restarts the same binary live with the new block). Only plugin
// blocks are reloaded; everything else in the file needs a restart. It
// returns the call that stops it and waits for it.
func reloadOnHUP(ctx context.Context, e *host.Engine, file string) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(ctx)
	// The config blocks the plugins run with: the file as `ferry run`
	// read it, then as each reload applied it.
	running := map[string][]byte{}
	if cfg, err := loadConfig(file, e.Name(), ""); err == nil {
		for _, pc := range cfg.Plugins {
			running[pc.Name] = pc.Body
		}
	}
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
			for _, line := range reloadPlugins(ctx, e, file, running) {
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
// or config block (against running, updated here) changed; it returns
// one line per plugin it acted on (or why it could not read the file).
func reloadPlugins(ctx context.Context, e *host.Engine, file string, running map[string][]byte) []string {
	cfg, err := loadConfig(file, e.Name(), "")
	if err != nil {
		return []string{fmt.Sprintf("%s not reloaded: %v", file, err)}
	}
	now := map[string]host.PluginStatus{}
	for _, st := range e.Status(ctx).Plugins {
		now[st.Name] = st
	}
	var out []string
	for _, pc := range cfg.Plugins {
		st, ok := now[pc.Name]
		if !pc.Enabled || !ok {
			continue
		}
		path := loader.Resolve(pc.Name, pc.Path, cfg.PluginDir, filepath.Dir(file))
		binary := path != st.Path || (pc.SHA256 != "" && !strings.EqualFold(pc.SHA256, st.SHA256))
		block := !bytes.Equal(bytes.TrimSpace(pc.Body), bytes.TrimSpace(running[pc.Name]))
		if !binary && !block {
			continue
		}
		up := host.PluginUpgrade{Name: pc.Name, Path: path, SHA256: pc.SHA256}
		what := "upgraded to " + path
		if block {
			up.Config = &pc
			what = "restarted live with its new config block"
			if binary {
				what = "upgraded to " + path + " with its new config block"
			}
		}
		if err := e.UpgradePlugin(ctx, up); err != nil {
			out = append(out, fmt.Sprintf("plugin %q not upgraded (the old binary still serves, with its config): %v", pc.Name, err))
			continue
		}
		running[pc.Name] = pc.Body
		out = append(out, fmt.Sprintf("plugin %q %s", pc.Name, what))
	}
	return out
}

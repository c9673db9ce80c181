package main_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/sdk/plugintest"
)

type pluginState struct {
	Name        string `json:"name"`
	State       string `json:"state"`
	PID         int    `json:"pid"`
	Restarts    *int   `json:"restarts"`
	Stalls      *int   `json:"stalls"`
	Outstanding *int   `json:"outstanding"`
}

// TestRunReportsPlugins: `ferry run` says in its ready line, and again
// when asked `plugins` on stdin, each plugin's state, process, restarts,
// stalls and outstanding descriptors.
func TestRunReportsPlugins(t *testing.T) {
	in, sc := startRun(t, "--name", "status-a")
	check := func(what string, ps []pluginState) {
		t.Helper()
		seen := map[string]bool{}
		for _, p := range ps {
			if p.State != "running" || p.PID <= 0 || p.Restarts == nil || *p.Restarts != 0 || p.Stalls == nil || *p.Stalls != 0 || p.Outstanding == nil || *p.Outstanding != 0 {
				t.Errorf("%s: plugin %s: %+v; want running with a pid, no restarts, no stalls, nothing outstanding", what, p.Name, p)
			}
			seen[p.Name] = true
		}
		if !seen["tcp"] || !seen["shm"] {
			t.Errorf("%s: plugins %v, want tcp and shm", what, seen)
		}
	}
	var ready struct {
		Plugins []pluginState `json:"plugins"`
	}
	readReady(t, sc, &ready)
	check("ready line", ready.Plugins)

	fmt.Fprintln(in, "plugins")
	if !sc.Scan() {
		t.Fatal("ferry run exited without answering `plugins`")
	}
	var now []pluginState
	if err := json.Unmarshal(sc.Bytes(), &now); err != nil {
		t.Fatalf("`plugins` answered %q: %v", sc.Text(), err)
	}
	check("plugins line", now)
}

// TestPluginsOfARunningEngine: `ferry plugins --engine ADDR` reports, from
// a running engine's control service, each plugin's state and process and
// each rail.
func TestPluginsOfARunningEngine(t *testing.T) {
	_, sc := startRun(t, "--name", "status-b")
	control := controlAddr(t, sc)

	b, err := exec.Command(filepath.Join(binDir, "ferry"), "plugins", "--engine", control, "--json").Output()
	if err != nil {
		t.Fatalf("ferry plugins --engine %s: %v", control, err)
	}
	var st struct {
		Name    string        `json:"name"`
		Plugins []pluginState `json:"plugins"`
		Rails   []struct {
			Transport string `json:"transport"`
			Name      string `json:"name"`
		} `json:"rails"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("ferry plugins --engine --json printed %q: %v", b, err)
	}
	if st.Name != "status-b" {
		t.Errorf("engine name %q, want status-b", st.Name)
	}
	states := map[string]string{}
	for _, p := range st.Plugins {
		states[p.Name] = p.State
		if p.PID <= 0 {
			t.Errorf("plugin %s has no pid: %+v", p.Name, p)
		}
	}
	if states["tcp"] != "running" || states["shm"] != "running" {
		t.Errorf("plugin states %v, want tcp and shm running", states)
	}
	rails := map[string]bool{}
	for _, r := range st.Rails {
		rails[r.Transport] = true
	}
	if !rails["tcp"] || !rails["shm"] {
		t.Errorf("rails %+v, want tcp's and shm's", st.Rails)
	}

	table, err := exec.Command(filepath.Join(binDir, "ferry"), "plugins", "--engine", control).Output()
	if err != nil {
		t.Fatalf("ferry plugins --engine (table): %v", err)
	}
	// Each plugin's completion contract counts, in both forms.
	for _, want := range []string{`"faulty":0`, `"unknown_completions":0`, `"duplicate_completions":0`, `"overlong_completions":0`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("--json lacks %s:\n%s", want, b)
		}
	}
	for _, want := range []string{"PLUGIN", "STATE", "running", "FAULTY", "BAD COMPLETIONS", "0 unknown, 0 duplicate, 0 over-long", "TRANSPORT", "EWMA Gb/s"} {
		if !strings.Contains(string(table), want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if err := exec.Command(filepath.Join(binDir, "ferry"), "plugins", "--engine", "127.0.0.1:1").Run(); err == nil {
		t.Error("ferry plugins --engine at a closed port succeeded")
	}
}

// startRun starts `ferry run --control-stdin` with args, logging at debug
// level, and returns its stdin and its stdout, the ready line next. When
// the test ends it stops the engine (EOF on stdin) and, if the test
// failed, prints the engine's log, which says why a plugin is not running
// should it not be.
func startRun(t *testing.T, args ...string) (io.WriteCloser, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "ferry"), append([]string{"run", "--control-stdin", "--log-level", "debug"}, args...)...)
	var logs plugintest.LogBuffer
	cmd.Stderr = &logs
	in, out := plugintest.StartPiped(t, cmd)
	t.Cleanup(func() {
		in.Close()
		cmd.Wait()
		if t.Failed() {
			t.Logf("engine log:\n%s", logs.String())
		}
	})
	return in, bufio.NewScanner(out)
}

// readReady reads the ready line of a `ferry run` started by startRun
// into v, the fields the test wants of it.
func readReady(t *testing.T, sc *bufio.Scanner, v any) {
	t.Helper()
	if !sc.Scan() {
		t.Fatal("ferry run exited before its ready line")
	}
	if err := json.Unmarshal(sc.Bytes(), v); err != nil {
		t.Fatalf("ready line %q: %v", sc.Text(), err)
	}
}

// controlAddr reads the ready line and returns the engine's control
// address from it.
func controlAddr(t *testing.T, sc *bufio.Scanner) string {
	t.Helper()
	var ready struct {
		Control string `json:"control"`
	}
	readReady(t, sc, &ready)
	if ready.Control == "" {
		t.Fatalf("ready line %q: want the control address", sc.Text())
	}
	return ready.Control
}

// TestPluginsOfASecretEngine: an engine with a cluster secret answers
// `ferry plugins --engine` only when the caller gives the engine's config,
// from which the tool takes the secret.
func TestPluginsOfASecretEngine(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("cmd-test-cluster-secret-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "engine.hcl")
	hcl := fmt.Sprintf("name = \"status-s\"\ncluster_secret_file = %q\nplugin_dir = %q\nplugin \"tcp\" {}\n", secret, binDir)
	if err := os.WriteFile(cfgFile, []byte(hcl), 0o600); err != nil {
		t.Fatal(err)
	}
	_, sc := startRun(t, "--config", cfgFile)
	control := controlAddr(t, sc)
	ferry := filepath.Join(binDir, "ferry")
	out, err := exec.Command(ferry, "plugins", "--engine", control).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--config") {
		t.Fatalf("ferry plugins --engine without the secret: err %v, output %q; want a refusal that says to pass --config", err, out)
	}
	b, err := exec.Command(ferry, "plugins", "--engine", control, "--config", cfgFile, "--json").Output()
	if err != nil {
		t.Fatalf("ferry plugins --engine --config: %v", err)
	}
	var st struct {
		Name    string        `json:"name"`
		Plugins []pluginState `json:"plugins"`
	}
	if err := json.Unmarshal(b, &st); err != nil || st.Name != "status-s" || len(st.Plugins) != 1 || st.Plugins[0].State != "running" {
		t.Fatalf("ferry plugins --engine --config --json printed %q (%v); want status-s with tcp running", b, err)
	}
}

package main_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
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
	cmd := exec.Command(filepath.Join(binDir, "ferry"), "run", "--name", "status-a", "--control-stdin")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer in.Close()
	sc := bufio.NewScanner(out)
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
	if !sc.Scan() {
		t.Fatal("ferry run exited before its ready line")
	}
	var ready struct {
		Plugins []pluginState `json:"plugins"`
	}
	if err := json.Unmarshal(sc.Bytes(), &ready); err != nil {
		t.Fatalf("ready line %q: %v", sc.Text(), err)
	}
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

package main_test

import (
	"encoding/json"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var binDir string

func TestMain(m *testing.M) {
	build := plugintest.Main{Binaries: []string{"ferry", "ferry-plugin-shm", "ferry-plugin-tcp", "ferry-plugin-nvlink", "ferry-device-simdev", "ferry-plugin-fault"},
		Extra: map[string]string{"ferry-plugin-broken": "github.com/ferrydev/ferry/cmd/ferry/testdata/ferry-plugin-broken"}}
	os.Exit(build.Run(m, func(dir string) { binDir = dir }))
}

func ferry(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "ferry"), args...)
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("ferry %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
	return string(out)
}

// TestBenchJSON runs a short bench and checks the row has every field the
// README promises, with a baseline measured in the same run.
func TestBenchJSON(t *testing.T) {
	for _, tc := range [][2]string{{"tcp", "write"}, {"tcp", "read"}, {"shm", "write"}} {
		tr, op := tc[0], tc[1]
		out := ferry(t, "bench", "--transport", tr, "--op", op, "--size", "64KiB", "--batch", "4", "--threads", "2", "--duration", "400ms", "--warmup", "100ms", "--json")
		var row map[string]any
		if err := json.Unmarshal([]byte(out), &row); err != nil {
			t.Fatalf("bench --json printed %q: %v", out, err)
		}
		for _, k := range []string{"transport", "op", "block_size", "batch", "threads", "bytes", "seconds", "gbps", "p50_us", "p99_us", "p999_us", "baseline", "baseline_gbps", "ratio"} {
			if _, ok := row[k]; !ok {
				t.Errorf("bench row lacks %q: %s", k, out)
			}
		}
		if row["transport"] != tr || row["op"] != op || row["block_size"].(float64) != 65536 || row["batch"].(float64) != 4 || row["threads"].(float64) != 2 {
			t.Errorf("bench row does not echo its parameters: %s", out)
		}
		if row["bytes"].(float64) <= 0 || row["gbps"].(float64) <= 0 || row["baseline_gbps"].(float64) <= 0 || row["ratio"].(float64) <= 0 {
			t.Errorf("bench moved nothing: %s", out)
		}
	}
}

func TestPluginsLists(t *testing.T) {
	out := ferry(t, "plugins", "--dir", binDir, "--json")
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r struct {
			Name      string `json:"name"`
			SHA256    string `json:"sha256"`
			Protocol  int    `json:"protocol"`
			Available bool   `json:"available"`
			Version   string `json:"version"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("plugins --json printed %q: %v", line, err)
		}
		if len(r.SHA256) != 64 || r.Protocol != 2 || !r.Available || r.Version == "" {
			t.Errorf("plugin %+v: want a sha256, protocol 2 (the SDK's), available, a version", r)
		}
		seen[r.Name] = true
	}
	// nvlink is built for TestGPUCheckSim; it probes available (its
	// simulated backend needs no GPU).
	if !seen["tcp"] || !seen["shm"] || !seen["nvlink"] || len(seen) != 3 {
		t.Fatalf("plugins listed %v, want tcp, shm and nvlink", seen)
	}
}

// TestDemo is the README's main job at a small size.
func TestDemo(t *testing.T) {
	out := ferry(t, "demo", "--max", "2MiB")
	if !strings.Contains(out, "all transfers verified") || strings.Contains(out, "FAILED") {
		t.Fatalf("demo:\n%s", out)
	}
}

package main_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/sdk/plugintest"
)

var binDir string

func TestMain(m *testing.M) {
	build := plugintest.Main{
		Binaries: []string{"ferry", "ferry-plugin-shm", "ferry-plugin-tcp", "ferry-plugin-nvlink", "ferry-plugin-fault", "ferry-device-simdev"},
		Extra: map[string]string{
			"ferry-plugin-nocheck": "github.com/ferrydev/ferry/cmd/ferry/testdata/ferry-plugin-nocheck",
			"ferry-plugin-broken":  "github.com/ferrydev/ferry/cmd/ferry/testdata/ferry-plugin-broken",
		},
	}
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

// writeTestFile writes body to dir/name (mode 0600) and returns its path.
func writeTestFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
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
	if strings.Contains(out, " 0.000 ") || !strings.Contains(out, "B/s") {
		t.Errorf("demo prints a rate of 0.000, or none with its unit:\n%s", out)
	}
}

// TestPluginsHidesTestTools: listing a directory leaves out the plugins
// that declare themselves test tools (fault) and the simulated device
// (simdev), and says so; --all lists them, devices in their own section.
func TestPluginsHidesTestTools(t *testing.T) {
	type row struct {
		Name      string `json:"name"`
		Kind      string `json:"kind"`
		TestTool  bool   `json:"test_tool"`
		Simulated bool   `json:"simulated"`
		Available bool   `json:"available"`
	}
	list := func(args ...string) map[string]row {
		got := map[string]row{}
		for _, line := range strings.Split(strings.TrimSpace(ferry(t, append([]string{"plugins", "--dir", binDir, "--json"}, args...)...)), "\n") {
			var r row
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("plugins --json printed %q: %v", line, err)
			}
			got[r.Name] = r
		}
		return got
	}
	def := list()
	for _, name := range []string{"fault", "nocheck", "simdev"} {
		if _, ok := def[name]; ok {
			t.Errorf("plugins without --all listed %s: %v", name, def)
		}
	}
	all := list("--all")
	if r := all["fault"]; !r.TestTool || r.Kind != "transport" {
		t.Errorf("plugins --all: fault is %+v, want a transport that is a test tool", r)
	}
	if r := all["simdev"]; !r.Simulated || r.Kind != "device" || !r.Available {
		t.Errorf("plugins --all: simdev is %+v, want an available simulated device", r)
	}
	if r := all["tcp"]; r.TestTool || r.Kind != "transport" {
		t.Errorf("plugins --all: tcp is %+v, want a transport that is no test tool", r)
	}
	table := ferry(t, "plugins", "--dir", binDir)
	for _, want := range []string{"not listed: broken (test tool), fault (test tool), nocheck (test tool), simdev (simulated device); --all lists them"} {
		if !strings.Contains(table, want) {
			t.Errorf("ferry plugins lacks %q:\n%s", want, table)
		}
	}
	if strings.Contains(table, "DEVICE PLUGIN") {
		t.Errorf("ferry plugins shows a device section with only a simulated device:\n%s", table)
	}
	table = ferry(t, "plugins", "--dir", binDir, "--all")
	if dev := strings.Index(table, "DEVICE PLUGIN"); dev < 0 || !strings.Contains(table[dev:], "simdev") || !strings.Contains(table[dev:], "(simulated)") ||
		strings.Contains(table[:dev], "simdev") || !strings.Contains(table[:dev], "(test tool)") {
		t.Errorf("ferry plugins --all: want the transports, fault a test tool, then simdev in a device section:\n%s", table)
	}
}

// TestFlagHelpReadable: in every command's -h, each flag's line is the
// flag and at most one word for its value. Back-quotes in a usage text
// name the value (package flag), so a usage that quotes a command with
// them prints that command after the flag's name instead.
func TestFlagHelpReadable(t *testing.T) {
	usage, _ := exec.Command(filepath.Join(binDir, "ferry")).CombinedOutput()
	var cmds []string
	for _, l := range strings.Split(string(usage), "\n") {
		if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(l, "  ") && !strings.HasPrefix(f[0], "-") {
			cmds = append(cmds, f[0])
		}
	}
	if len(cmds) < 10 {
		t.Fatalf("ferry's usage lists %d commands: %q\n%s", len(cmds), cmds, usage)
	}
	flagLine := regexp.MustCompile(`^  -[a-z0-9-]+( [a-z0-9.]+)?$`)
	for _, c := range cmds {
		out, _ := exec.Command(filepath.Join(binDir, "ferry"), c, "-h").CombinedOutput()
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "  -") && !flagLine.MatchString(l) {
				t.Errorf("ferry %s -h: flag line %q has more than a value's name after the flag", c, l)
			}
		}
		if c == "run" && !strings.Contains(string(out), `"sha256 <offset> <length>"`) {
			t.Errorf("ferry run -h does not show the control lines:\n%s", out)
		}
	}
}

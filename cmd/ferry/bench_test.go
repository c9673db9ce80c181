package main_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchVerified: every kind of run ends by checking the receiving
// side's bytes, Ferry's and the baseline's, and says so in its row.
func TestBenchVerified(t *testing.T) {
	for _, tc := range [][2]string{{"shm", "read"}, {"tcp", "write"}} {
		out := ferry(t, "bench", "--transport", tc[0], "--op", tc[1], "--size", "4KiB", "--batch", "8", "--threads", "2", "--duration", "200ms", "--warmup", "50ms", "--json")
		var row struct {
			Verified     *bool   `json:"verified"`
			BaselineGbps float64 `json:"baseline_gbps"`
		}
		if err := json.Unmarshal([]byte(out), &row); err != nil {
			t.Fatalf("bench --json printed %q: %v", out, err)
		}
		if row.Verified == nil || !*row.Verified || row.BaselineGbps <= 0 {
			t.Errorf("%s %s: want verified true and a baseline: %s", tc[0], tc[1], out)
		}
	}
}

// TestBenchTargetVerified: against an engine bench did not start, the
// check goes through Ferry, and the far buffer ends up holding the
// pattern, not the zeroes it started with.
func TestBenchTargetVerified(t *testing.T) {
	const n = 4 * 64 << 10
	in, sc := startRun(t, "--name", "bench-far", "--expose", fmt.Sprint(n))
	var ready struct {
		Metastore string `json:"metastore"`
	}
	readReady(t, sc, &ready)
	if ready.Metastore == "" {
		t.Fatalf("ready line %q: want a metastore URL", sc.Text())
	}
	out := ferry(t, "bench", "--target", "bench-far", "--metastore", ready.Metastore, "--transport", "tcp", "--op", "write",
		"--size", "64KiB", "--batch", "2", "--threads", "2", "--duration", "200ms", "--warmup", "50ms", "--json")
	var row struct {
		Verified *bool  `json:"verified"`
		Baseline string `json:"baseline"`
	}
	if err := json.Unmarshal([]byte(out), &row); err != nil {
		t.Fatalf("bench --json printed %q: %v", out, err)
	}
	if row.Verified == nil || !*row.Verified || row.Baseline != "" {
		t.Errorf("want verified true and no baseline against a --target: %s", out)
	}
	fmt.Fprintf(in, "sha256 0 %d\n", n)
	if !sc.Scan() {
		t.Fatal("ferry run exited without answering sha256")
	}
	zero := sha256.Sum256(make([]byte, n))
	if sc.Text() == hex.EncodeToString(zero[:]) {
		t.Error("the far engine's buffer is still all zeroes after a verified write bench")
	}
}

// TestBenchConfigReachesTarget: the target engine that bench starts runs
// --config's plugin blocks. Only the file names the fault plugin, so a
// bench over it moves and verifies bytes only if the target runs it too;
// with the built-in config on the target it cannot.
func TestBenchConfigReachesTarget(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "engine.hcl")
	body := "name = \"bench-cfg\"\nplugin_dir = \"" + binDir + "\"\n" +
		"control {\n  listen = \"127.0.0.1:" + freePort(t) + "\"\n}\n" +
		"plugin \"fault\" {\n  config {\n    tcp {\n      listen = [\"127.0.0.1:0\"]\n    }\n  }\n}\n"
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"bench", "--config", cfg, "--transport", "fault", "--op", "write", "--size", "64KiB", "--batch", "2",
		"--duration", "100ms", "--warmup", "20ms", "--json"}
	out := ferry(t, args...)
	var row struct {
		Verified  *bool  `json:"verified"`
		Transport string `json:"transport"`
		Bytes     uint64 `json:"bytes"`
	}
	if err := json.Unmarshal([]byte(out), &row); err != nil {
		t.Fatalf("bench --json printed %q: %v", out, err)
	}
	if row.Verified == nil || !*row.Verified || row.Transport != "fault" || row.Bytes == 0 {
		t.Errorf("bench over the file's fault plugin: want verified bytes: %s", out)
	}
	b, err := exec.Command(filepath.Join(binDir, "ferry"), append(args, "--target-config", "builtin")...).CombinedOutput()
	if err == nil || !strings.Contains(string(b), "does not offer it") {
		t.Errorf("bench with the built-in config on the target: %v, want it refused for want of fault there:\n%s", err, b)
	}
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
}

// TestBenchCtxSwitches: a run that moved data reports context switches
// per request for each process it measured: the engine, its plugins, the
// target engine bench started and that engine's plugins, and for the
// baseline the bench itself and, over tcp, its peer.
func TestBenchCtxSwitches(t *testing.T) {
	for _, tr := range []string{"tcp", "shm"} {
		out := ferry(t, "bench", "--transport", tr, "--op", "write", "--size", "4KiB", "--batch", "1",
			"--duration", "300ms", "--warmup", "50ms", "--json")
		var row struct {
			Bytes    uint64             `json:"bytes"`
			Verified bool               `json:"verified"`
			Ferry    map[string]float64 `json:"ctx_switches_per_req"`
			Baseline map[string]float64 `json:"baseline_ctx_switches_per_req"`
		}
		if err := json.Unmarshal([]byte(out), &row); err != nil {
			t.Fatalf("bench --json printed %q: %v", out, err)
		}
		if row.Bytes == 0 || !row.Verified {
			t.Fatalf("%s: the run moved no verified data: %s", tr, out)
		}
		want := []string{"engine", "plugin:" + tr, "target", "target-plugin:" + tr}
		var sum float64
		for _, k := range want {
			v, ok := row.Ferry[k]
			if !ok || v < 0 {
				t.Errorf("%s: ctx_switches_per_req[%q] = %v, %v; want a figure for it: %s", tr, k, v, ok, out)
			}
			sum += v
		}
		// Thousands of 4 KiB requests between four processes cannot all
		// pass without one of them ever leaving its CPU.
		if sum <= 0 {
			t.Errorf("%s: context switches per request sum to %v over %v: want more than 0", tr, sum, row.Ferry)
		}
		wantBase := []string{"bench"}
		if tr == "tcp" {
			wantBase = append(wantBase, "peer")
		}
		for _, k := range wantBase {
			if _, ok := row.Baseline[k]; !ok {
				t.Errorf("%s: baseline_ctx_switches_per_req has no %q: %s", tr, k, out)
			}
		}
		if tr == "tcp" && row.Baseline["bench"]+row.Baseline["peer"] <= 0 {
			t.Errorf("tcp: the raw baseline's round trips over a socket made no context switch: %v", row.Baseline)
		}
	}
	table := ferry(t, "bench", "--transport", "tcp", "--size", "4KiB", "--duration", "200ms", "--warmup", "20ms")
	if !strings.Contains(table, "CSW/REQ") || !strings.Contains(table, "context switches per request") ||
		!strings.Contains(table, "plugin:tcp=") {
		t.Errorf("the table shows no context switches per request:\n%s", table)
	}
}

// TestBenchSplitsBatchTime: a run reports where its batches spent their
// time, in Submit and then until Wait returned; each part is a share of
// a batch's time, so neither median is above the batch's p99.9.
func TestBenchSplitsBatchTime(t *testing.T) {
	out := ferry(t, "bench", "--transport", "shm", "--size", "4KiB", "--batch", "16",
		"--duration", "300ms", "--warmup", "50ms", "--no-baseline", "--json")
	var row struct {
		Verified bool    `json:"verified"`
		P999     float64 `json:"p999_us"`
		Submit   float64 `json:"submit_p50_us"`
		Wait     float64 `json:"wait_p50_us"`
	}
	if err := json.Unmarshal([]byte(out), &row); err != nil {
		t.Fatalf("bench --json printed %q: %v", out, err)
	}
	if !row.Verified || row.Submit <= 0 || row.Wait <= 0 || row.Submit > row.P999 || row.Wait > row.P999 {
		t.Fatalf("submit_p50_us %v, wait_p50_us %v (p99.9 %v us): want each above 0 and at most p99.9: %s", row.Submit, row.Wait, row.P999, out)
	}
	table := ferry(t, "bench", "--transport", "shm", "--size", "4KiB", "--batch", "16", "--duration", "200ms", "--warmup", "20ms", "--no-baseline")
	if !strings.Contains(table, "a batch's time (median): ") || !strings.Contains(table, "us in Submit, then") {
		t.Errorf("the table does not split a batch's time:\n%s", table)
	}
}

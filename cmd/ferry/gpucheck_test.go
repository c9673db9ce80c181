package main_test

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGPUCheckSim runs `ferry gpu-check` on the simulated device: every
// verification passes, every figure and its baseline are there, and the
// pipelining check reports its hops. The ratio itself is not asserted:
// on a loaded CI machine it says more about the machine than the code.
func TestGPUCheckSim(t *testing.T) {
	size := "16MiB"
	if testing.Short() {
		size = "2MiB"
	}
	out := ferry(t, "gpu-check", "--device", "sim", "--size", size, "--runs", "3", "--log-level", "error")
	var rep struct {
		Check    string               `json:"check"`
		Devices  []string             `json:"device_names"`
		Figures  map[string]gpuFigure `json:"figures"`
		Baseline map[string]gpuFigure `json:"baseline"`
		Ratios   map[string]float64   `json:"ratios"`
		Verified map[string]bool      `json:"verified"`
		Pipeline *struct {
			Staged    gpuFigure `json:"staged_d2d"`
			DeviceHop gpuFigure `json:"device_hop"`
			TCPHop    gpuFigure `json:"tcp_hop"`
			Slowest   string    `json:"slowest_hop"`
			Ratio     float64   `json:"ratio"`
		} `json:"pipeline"`
		Pass bool `json:"pass"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("gpu-check printed %q: %v", out, err)
	}
	if rep.Check != "gpu-check" || !rep.Pass || len(rep.Devices) == 0 {
		t.Fatalf("want a passing check with device names: %s", out)
	}
	for _, k := range []string{"nvlink_h2d", "nvlink_d2d", "nvlink_d2h", "staged_h2d", "staged_d2d", "staged_d2h"} {
		if !rep.Verified[k] {
			t.Errorf("%s not verified: %s", k, out)
		}
		f := rep.Figures[k]
		if f.Median <= 0 || f.Min > f.Median || f.Median > f.Max || rep.Ratios[k+"_vs_baseline"] <= 0 {
			t.Errorf("%s: figure %v, ratio %v", k, f, rep.Ratios[k+"_vs_baseline"])
		}
	}
	for _, k := range []string{"nvlink_route", "staged_route", "pipeline_staged_d2d"} {
		if !rep.Verified[k] {
			t.Errorf("%s not verified: %s", k, out)
		}
	}
	if rep.Baseline["d2d"].Median <= 0 {
		t.Errorf("no memmove baseline: %s", out)
	}
	p := rep.Pipeline
	if p == nil || p.Staged.Median <= 0 || p.DeviceHop.Median <= 0 || p.TCPHop.Median <= 0 || p.Ratio <= 0 || p.Slowest == "" {
		t.Errorf("pipelining check incomplete: %s", out)
	}
}

type gpuFigure struct{ Median, Min, Max float64 }

// BenchmarkStagedPipeline is issue 28's pipelining check as a benchmark:
// each iteration runs `ferry gpu-check --device sim` at 64 MiB with the
// simulated device throttled to 1 GB/s (the slowest hop), which
// interleaves, 3 times, the staged GPU→tcp→GPU transfer with each hop
// measured alone, and reports their medians and the ratio of the staged
// transfer to its slowest hop (the issue asks ≥ 0.8):
//
//	go test -run '^$' -bench StagedPipeline -benchtime 1x -count 3 ./cmd/ferry/
func BenchmarkStagedPipeline(b *testing.B) {
	for b.Loop() {
		out, err := exec.Command(filepath.Join(binDir, "ferry"), "gpu-check", "--device", "sim", "--size", "64MiB", "--runs", "3",
			"--sim-copy-bandwidth", "1GB/s", "--log-level", "error").Output()
		if err != nil {
			b.Fatalf("ferry gpu-check: %v\n%s", err, out)
		}
		var rep struct {
			Pipeline struct {
				Staged    gpuFigure `json:"staged_d2d"`
				DeviceHop gpuFigure `json:"device_hop"`
				TCPHop    gpuFigure `json:"tcp_hop"`
				Ratio     float64   `json:"ratio"`
			} `json:"pipeline"`
			Pass bool `json:"pass"`
		}
		if err := json.Unmarshal(out, &rep); err != nil || !rep.Pass {
			b.Fatalf("gpu-check printed %q (%v)", out, err)
		}
		p := rep.Pipeline
		b.ReportMetric(p.Staged.Median, "staged-GB/s")
		b.ReportMetric(p.DeviceHop.Median, "device-hop-GB/s")
		b.ReportMetric(p.TCPHop.Median, "tcp-hop-GB/s")
		b.ReportMetric(p.Ratio, "ratio")
	}
}

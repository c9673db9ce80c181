package main_test

import (
	"encoding/json"
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

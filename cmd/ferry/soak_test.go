package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSoakShort runs `ferry soak` against the real binaries for about
// 25 seconds with two kill -9 faults of plugins, the faults that hold on
// this tree (docs/soak.md says which do not yet), and checks that they
// were injected, that traffic ran and was read back, and that no byte
// read back was wrong and no call hung. Drift is not judged here: the
// leak per plugin restart of issue 26 is fixed elsewhere, and 25
// seconds say little about RSS.
func TestSoakShort(t *testing.T) {
	if testing.Short() {
		t.Skip("a 25-second soak")
	}
	dir := t.TempDir()
	csv, png := filepath.Join(dir, "series.csv"), filepath.Join(dir, "series.png")
	out := ferry(t, "soak", "--duration", "25s", "--warmup", "5s", "--gap", "5s-7s", "--faults", "kill", "--max-faults", "2",
		"--workers", "2", "--span", "16MiB", "--max-size", "4MiB", "--seed", "26",
		"--max-fd-drift", "1000", "--max-goroutine-drift", "1000", "--max-rss-growth", "10",
		"--series", csv, "--plot", png, "--dump-dir", dir, "--log-level", "error", "--json")
	var rep struct {
		Total struct {
			Faults int            `json:"faults"`
			Tasks  int            `json:"tasks"`
			States map[string]int `json:"states"`
			Older  uint64         `json:"wrong_older"`
			Other  uint64         `json:"wrong_other"`
			Hung   int            `json:"hung"`
		} `json:"total"`
		Faults []struct {
			Kind      string `json:"kind"`
			Err       string `json:"error"`
			Recovered int64  `json:"recovered"`
		} `json:"faults"`
		Failures []string `json:"failures"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("soak --json printed %q: %v", out, err)
	}
	tot := rep.Total
	if tot.Older != 0 || tot.Other != 0 || tot.Hung != 0 || len(rep.Failures) != 0 {
		t.Errorf("soak: %d bytes of an older write, %d other wrong bytes, %d hung calls, failures %q", tot.Older, tot.Other, tot.Hung, rep.Failures)
	}
	if tot.Faults != 2 || len(rep.Faults) != 2 {
		t.Errorf("soak injected %d faults (%+v); want 2", tot.Faults, rep.Faults)
	}
	for _, f := range rep.Faults {
		if !strings.HasPrefix(f.Kind, "kill ") || f.Err != "" {
			t.Errorf("fault %+v: want a kill, injected without error", f)
		}
		if f.Recovered < 0 {
			t.Errorf("fault %+v: no write completed after it", f)
		}
	}
	if tot.Tasks < 100 || tot.States["COMPLETED"] < tot.Tasks/2 {
		t.Errorf("soak ran %d tasks, %d COMPLETED; want traffic", tot.Tasks, tot.States["COMPLETED"])
	}
	series, err := os.ReadFile(csv)
	if err != nil || !strings.HasPrefix(string(series), "t_s,fds,goroutines,rss_bytes,faults\n") || strings.Count(string(series), "\n") < 20 {
		t.Errorf("series %s: %v\n%s", csv, err, series)
	}
	if b, err := os.ReadFile(png); err != nil || len(b) < 8 || string(b[1:4]) != "PNG" {
		t.Errorf("plot %s: %v", png, err)
	}
}

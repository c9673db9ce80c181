package soak

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestReport: outcomes land in the phase they were submitted in, phases
// of one kind sum into one row, recovery and drift per fault, and the
// verdict fails on wrong bytes, hangs and drift.
func TestReport(t *testing.T) {
	tl := NewTally()
	s := func(at, fds, gor int, rss int64) Sample {
		return Sample{At: time.Duration(at) * time.Second, FDs: fds, Goroutines: gor, RSS: rss}
	}
	ph0 := tl.Phase()
	tl.Task(ph0, "COMPLETED")
	tl.Task(ph0, "COMPLETED")
	ph1 := tl.Inject(Fault{Kind: "kill target/tcp", At: 10 * time.Second}, s(10, 40, 60, 100<<20))
	tl.Task(ph0, "TIMEOUT") // submitted before the fault, ended after
	tl.Task(ph1, "FAILED")
	tl.Failed(ph1, "FAILED", "memory not registered")
	tl.Completed(ph1, 9*time.Second, 11*time.Second) // submitted before the fault: no recovery
	tl.Completed(ph1, 12*time.Second, 13*time.Second)
	tl.Completed(ph1, 14*time.Second, 15*time.Second) // only the first counts
	tl.Read(ph1, Verdict{Older: 4096, First: "offset 0: write 1's bytes"})
	ph2 := tl.Inject(Fault{Kind: "restart-target", At: 30 * time.Second}, s(30, 42, 64, 100<<20))
	tl.Hung(ph2)
	ph3 := tl.Inject(Fault{Kind: "kill target/tcp", At: 50 * time.Second}, s(50, 42, 60, 100<<20))
	tl.Failed(ph3, "FAILED", "memory not registered")
	tl.Completed(ph3, 51*time.Second, 52*time.Second)
	tl.Task(ph3, "COMPLETED")
	r := tl.Report(s(5, 40, 60, 100<<20), s(60, 44, 62, 100<<20), Thresholds{FDs: 10, Goroutines: 10, RSSGrowth: 0.05})

	if len(r.Rows) != 3 || r.Rows[0].Kind != "none" || r.Rows[1].Kind != "kill target/tcp" || r.Rows[2].Kind != "restart-target" {
		t.Fatalf("rows %+v", r.Rows)
	}
	none, kill, restart := r.Rows[0], r.Rows[1], r.Rows[2]
	if none.Tasks != 3 || none.States["COMPLETED"] != 2 || none.States["TIMEOUT"] != 1 || none.Faults != 0 {
		t.Errorf("none: %+v", none)
	}
	if kill.Faults != 2 || kill.Tasks != 2 || kill.States["FAILED"] != 1 || kill.Older != 4096 || kill.Other != 0 {
		t.Errorf("kill: %+v", kill)
	}
	if kill.Errors["FAILED: memory not registered"] != 2 || len(kill.Errors) != 1 {
		t.Errorf("kill errors: %v", kill.Errors)
	}
	if kill.RecoverMean != 2500*time.Millisecond || kill.RecoverMax != 3*time.Second || kill.Unrecovered != 0 {
		t.Errorf("kill recovery: mean %v max %v unrecovered %d; want 2.5s, 3s, 0", kill.RecoverMean, kill.RecoverMax, kill.Unrecovered)
	}
	// Phase 1: 40 -> 42 FDs; phase 3: 42 -> 44: mean +2. Goroutines
	// 60 -> 64 and 60 -> 62: +3.
	if kill.FDs != 2 || kill.Goroutines != 3 {
		t.Errorf("kill drift: FDs %v goroutines %v; want +2, +3", kill.FDs, kill.Goroutines)
	}
	if restart.Hung != 1 || restart.Unrecovered != 1 || restart.FDs != 0 || restart.Goroutines != -4 {
		t.Errorf("restart: %+v", restart)
	}
	if r.Total.Tasks != 5 || r.Total.Faults != 3 || r.Total.Older != 4096 || r.Total.Hung != 1 || r.Total.FDs != 4 || r.Total.Goroutines != 2 {
		t.Errorf("total: %+v", r.Total)
	}
	if len(r.Faults) != 3 || r.Faults[0].Recovered != 3*time.Second || r.Faults[1].Recovered >= 0 {
		t.Errorf("faults: %+v", r.Faults)
	}
	if r.OK() || len(r.Failures) != 2 {
		t.Errorf("failures %q: want stale bytes and a hang", r.Failures)
	}
	var out bytes.Buffer
	r.WriteText(&out)
	for _, want := range []string{"kill target/tcp", "restart-target", "FAIL: 4096 bytes read back COMPLETED were an older write's", "FAIL: 1 calls hung",
		"wrong bytes after kill target/tcp: offset 0: write 1's bytes", "after kill target/tcp: 2× FAILED: memory not registered"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// TestReportDrift: drift past each threshold fails the run, within them
// passes it.
func TestReportDrift(t *testing.T) {
	base := Sample{FDs: 40, Goroutines: 60, RSS: 100 << 20}
	lim := Thresholds{FDs: 4, Goroutines: 10, RSSGrowth: 0.05}
	for _, tc := range []struct {
		final Sample
		fails string
	}{
		{Sample{FDs: 44, Goroutines: 70, RSS: 104 << 20}, ""},
		{Sample{FDs: 45, Goroutines: 60, RSS: 100 << 20}, "FDs drifted by +5 (limit 4)"},
		{Sample{FDs: 40, Goroutines: 71, RSS: 100 << 20}, "goroutines drifted by +11 (limit 10)"},
		{Sample{FDs: 40, Goroutines: 60, RSS: 106 << 20}, "RSS grew by 6.0% (limit 5.0%)"},
	} {
		r := NewTally().Report(base, tc.final, lim)
		got := strings.Join(r.Failures, "; ")
		if got != tc.fails {
			t.Errorf("final %+v: failures %q, want %q", tc.final, got, tc.fails)
		}
	}
}

// TestReportUpgrade: a task that ends FAILED or INVALID in flight across
// a live upgrade fails the run, unless a fault of another kind began
// while it ran; an upgrade that did not take over fails it too.
func TestReportUpgrade(t *testing.T) {
	tl := NewTally()
	ph0 := tl.Phase()
	up1 := tl.Inject(Fault{Kind: "upgrade initiator/tcp", At: 10 * time.Second}, Sample{})
	tl.Task(ph0, "FAILED")    // submitted before it, ended after: counts
	tl.Task(up1, "FAILED")    // submitted in its phase: counts
	tl.Task(up1, "TIMEOUT")   // expired: not a failure
	tl.Task(up1, "COMPLETED") // fine
	kill := tl.Inject(Fault{Kind: "kill target/shm", At: 20 * time.Second}, Sample{})
	tl.Task(up1, "INVALID") // the kill began while it ran: the kill's
	tl.Task(kill, "FAILED") // the kill's
	up2 := tl.Inject(Fault{Kind: "upgrade target/shm", At: 30 * time.Second, Err: "target: error: checksum mismatch"}, Sample{})
	tl.Task(up2, "INVALID") // counts
	r := tl.Report(Sample{}, Sample{}, Thresholds{FDs: 1, Goroutines: 1, RSSGrowth: 1})
	byKind := map[string]Row{}
	for _, row := range r.Rows {
		byKind[row.Kind] = row
	}
	if n := byKind["upgrade initiator/tcp"].AcrossUpgrade; n != 2 {
		t.Errorf("upgrade initiator/tcp: %d tasks failed across it, want 2", n)
	}
	if n := byKind["upgrade target/shm"].AcrossUpgrade; n != 1 {
		t.Errorf("upgrade target/shm: %d tasks failed across it, want 1", n)
	}
	if n := byKind["kill target/shm"].AcrossUpgrade + byKind["none"].AcrossUpgrade; n != 0 {
		t.Errorf("%d tasks of other phases counted against an upgrade", n)
	}
	want := []string{"3 tasks ended FAILED or INVALID in flight across a live upgrade",
		"upgrade target/shm at 30s did not take over: target: error: checksum mismatch"}
	if !slices.Equal(r.Failures, want) {
		t.Errorf("failures %q, want %q", r.Failures, want)
	}
}

func TestCheckKind(t *testing.T) {
	for k, ok := range map[string]bool{
		"kill": true, "stop": true, "restart-target": true, "slow-link": true,
		"stop:target/tcp": true, "kill:initiator": true, "kill:target/shm": true,
		"upgrade": true, "upgrade:target/shm": true, "upgrade:initiator": true,
		"restart-target:target": false, "upgrade:target/rdma": false, "stop:elsewhere": false, "kill:target/rdma": false, "explode": false,
	} {
		if err := checkKind(k); (err == nil) != ok {
			t.Errorf("checkKind(%q) = %v; want ok %v", k, err, ok)
		}
	}
}

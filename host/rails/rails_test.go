package rails

import (
	"math"
	"testing"
	"time"
)

const MiB = 1 << 20

func TestSpraySharesFollowBandwidth(t *testing.T) {
	cases := []struct {
		name      string
		rails     []Rail
		trueGbps  []float64
		numa      int
		window    int
		burst     bool
		lo, hi    float64 // bounds on rail 1's share of the bytes
		minFactor float64 // throughput at least this times rail 0 alone
	}{
		{
			// The case: equal nominal bandwidth, rail 1 really at
			// a quarter of rail 0. Ideal share 1/5.
			name:  "quarter speed rail carries a fifth",
			rails: []Rail{{"fast", -1, 10}, {"slow", -1, 10}}, trueGbps: []float64{10, 2.5},
			numa: -1, window: 16, lo: 0.15, hi: 0.25, minFactor: 1,
		},
		{
			name:  "unknown nominal bandwidth learns the same",
			rails: []Rail{{"fast", -1, 0}, {"slow", -1, 0}}, trueGbps: []float64{10, 2.5},
			numa: -1, window: 16, lo: 0.15, hi: 0.25, minFactor: 1,
		},
		{
			name:  "equal rails split evenly",
			rails: []Rail{{"a", 0, 10}, {"b", 0, 10}}, trueGbps: []float64{10, 10},
			numa: 0, window: 16, lo: 0.45, hi: 0.55, minFactor: 1.9,
		},
		{
			// Requests of 16 slices, one at a time: the penalty makes
			// the remote rail's queue 1/1.3 of the local one's, 7 of 16.
			name:  "numa penalty shifts load to the local rail",
			rails: []Rail{{"local", 0, 10}, {"remote", 1, 10}}, trueGbps: []float64{10, 10},
			numa: 0, window: 16, burst: true, lo: 0.40, hi: 0.46, minFactor: 1.5,
		},
		{
			name:  "no penalty when the request's node is unknown",
			rails: []Rail{{"local", 0, 10}, {"remote", 1, 10}}, trueGbps: []float64{10, 10},
			numa: -1, window: 16, burst: true, lo: 0.49, hi: 0.51, minFactor: 1.9,
		},
		{
			name:  "no penalty when the rail's node is unknown",
			rails: []Rail{{"local", 0, 10}, {"remote", -1, 10}}, trueGbps: []float64{10, 10},
			numa: 0, window: 16, burst: true, lo: 0.49, hi: 0.51, minFactor: 1.9,
		},
	}
	const total = 4 << 30
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			run := func(rails []Rail, gbps []float64) (*sim, time.Duration) {
				sr := make([]simRail, len(rails))
				for i := range sr {
					sr[i].gbps = constGbps(gbps[i])
				}
				m := newSim(New(rails, Options{}), sr, MiB, c.window)
				m.numa, m.burst, m.left = c.numa, c.burst, total
				return m, m.run(time.Hour)
			}
			_, alone := run(c.rails[:1], c.trueGbps[:1])
			m, both := run(c.rails, c.trueGbps)
			got := share(m.bytes(), 1)
			factor := float64(alone) / float64(both)
			st := m.s.Stats(t0.Add(m.now))
			t.Logf("rail 1 share %.3f; throughput %.2f Gbps = %.2fx rail 0 alone; EWMA %.2f / %.2f Gbps",
				got, float64(total*8)/both.Seconds()/1e9, factor, st[0].EWMAGbps, st[1].EWMAGbps)
			if got < c.lo || got > c.hi {
				t.Errorf("rail 1 share %.3f, want [%.2f, %.2f]", got, c.lo, c.hi)
			}
			if factor < c.minFactor {
				t.Errorf("throughput %.2fx rail 0 alone, want at least %.2fx", factor, c.minFactor)
			}
			for i, s := range st {
				if math.Abs(s.EWMAGbps-c.trueGbps[i]) > 0.1*c.trueGbps[i] {
					t.Errorf("rail %d EWMA %.2f Gbps, true %.2f", i, s.EWMAGbps, c.trueGbps[i])
				}
				if s.InFlight != 0 || s.Errors != 0 || s.Paused {
					t.Errorf("rail %d stats at the end: %+v", i, s)
				}
			}
		})
	}
}

// A rail whose bandwidth collapses and comes back: without probes it never
// gets a slice again (its estimate stays low and it is never tried); with
// them it regains its share.
func TestProbesNoticeRecoveredRail(t *testing.T) {
	cases := []struct {
		name   string
		probe  float64
		lo, hi float64
	}{
		{"with probes", 0, 0.45, 0.55},
		{"without probes", -1, 0, 0.01},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			slow := func(at time.Duration) float64 {
				if at >= 2*time.Second && at < 10*time.Second {
					return 0.1
				}
				return 10
			}
			rails := []Rail{{"a", -1, 10}, {"b", -1, 10}}
			m := newSim(New(rails, Options{ProbeShare: c.probe}), []simRail{{gbps: constGbps(10)}, {gbps: slow}}, MiB, 16)
			m.run(2 * time.Second)
			b0 := m.bytes()
			m.run(10 * time.Second)
			b1 := m.bytes()
			degraded := share([]uint64{b1[0] - b0[0], b1[1] - b0[1]}, 1)
			m.run(15 * time.Second)
			b2 := m.bytes()
			m.run(20 * time.Second)
			b3 := m.bytes()
			recovered := share([]uint64{b3[0] - b2[0], b3[1] - b2[1]}, 1)
			t.Logf("rail b share: first 2 s %.3f, degraded %.4f, recovered (15-20 s) %.3f", share(b0, 1), degraded, recovered)
			if degraded > 0.01 {
				t.Errorf("degraded rail share %.4f, want at most 0.01", degraded)
			}
			if recovered < c.lo || recovered > c.hi {
				t.Errorf("recovered rail share %.3f, want [%.2f, %.2f]", recovered, c.lo, c.hi)
			}
		})
	}
}

// A rail failing every slice in two bursts is paused for 30 s, then 60 s,
// gets no slice while paused and gets slices again after each pause.
func TestFailingRailIsPausedAndComesBack(t *testing.T) {
	bursts := [][2]time.Duration{{20 * time.Second, 21 * time.Second}, {100 * time.Second, 101 * time.Second}}
	fails := func(at time.Duration) bool {
		for _, b := range bursts {
			if at >= b[0] && at < b[1] {
				return true
			}
		}
		return false
	}
	rails := []Rail{{"a", -1, 10}, {"b", -1, 10}}
	m := newSim(New(rails, Options{}), []simRail{{gbps: constGbps(10)}, {gbps: constGbps(10), fails: fails}}, 8*MiB, 16)
	m.run(200 * time.Second)

	if len(m.pauses) != 2 {
		t.Fatalf("pauses %+v, want 2", m.pauses)
	}
	for k, p := range m.pauses {
		want := 30 * time.Second << k
		if p.rail != 1 || p.until-p.at != want || p.at < bursts[k][0] || p.at >= bursts[k][1] {
			t.Errorf("pause %d: %+v, want rail 1 for %v during burst %v", k, p, want, bursts[k])
		}
		var during, after int
		for _, at := range m.sends[1] {
			switch {
			case at >= p.at && at < p.until:
				during++
			case at >= p.until && at < p.until+time.Second:
				after++
			}
		}
		if during != 0 || after == 0 {
			t.Errorf("pause %d: rail b got %d slices while paused and %d in the second after", k, during, after)
		}
		t.Logf("pause %d of rail b: %v to %v (%v); %d slices in the second after", k, p.at, p.until, p.until-p.at, after)
	}
	st := m.s.Stats(t0.Add(m.now))
	if st[1].Errors < 6 || st[0].Errors != 0 || st[1].Paused {
		t.Errorf("stats %+v", st)
	}
	t.Logf("stats: %+v", st)
}

func TestAllPaused(t *testing.T) {
	if New(nil, Options{}).Pick(MiB, -1, t0) != -1 {
		t.Error("Pick with no rails did not return -1")
	}
	s := New([]Rail{{"a", 0, 10}, {"b", 1, 10}}, Options{})
	at := func(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }
	for r := range 2 {
		for k := range 3 {
			s.Sent(r, MiB, at(0))
			s.Done(r, MiB, at(0), at(float64(k)), false)
		}
	}
	if i := s.Pick(MiB, 0, at(5)); i != -1 {
		t.Errorf("Pick with every rail paused = %d, want -1", i)
	}
	if st := s.Stats(at(5)); !st[0].Paused || !st[1].Paused || st[0].InFlight+st[1].InFlight != 0 {
		t.Errorf("stats %+v", st)
	}
	s.ProbeOK(1, at(10))
	if i := s.Pick(MiB, 0, at(10)); i != 1 {
		t.Errorf("Pick after a probe restored rail 1 = %d, want 1", i)
	}
	s.Sent(1, MiB, at(10))
	if i := s.Pick(MiB, 0, at(31)); i != 1 {
		t.Errorf("Pick while rail 0 is still paused = %d, want 1", i)
	}
	if i := s.Pick(MiB, 0, at(32)); i != 0 {
		t.Errorf("Pick after rail 0's cooldown = %d, want 0 (local, idle)", i)
	}
}

func TestMonitor(t *testing.T) {
	type step struct {
		at       float64 // seconds
		op       string  // "fail", "burst" (3 fails 1 ms apart), "probe", "check"
		paused   bool    // after the step
		cooldown float64 // if non-zero, Cooldown after the step, in seconds
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"two errors do not pause", []step{{0, "fail", false, 0}, {1, "fail", false, 0}, {2, "check", false, 0}}},
		{"three errors within the window pause", []step{{0, "fail", false, 0}, {5, "fail", false, 0}, {9.9, "fail", true, 30}, {39.8, "check", true, 0}, {39.9, "check", false, 0}}},
		{"three errors spread wider than the window do not", []step{{0, "fail", false, 0}, {5, "fail", false, 0}, {10, "fail", false, 0}, {11, "fail", true, 30}}},
		{"cooldown doubles up to the cap", []step{
			{0, "burst", true, 30}, {31, "burst", true, 60}, {92, "burst", true, 120}, {213, "burst", true, 240},
			{454, "burst", true, 300}, {755, "burst", true, 300}, {1054, "check", true, 0}, {1056, "check", false, 0},
		}},
		{"errors while paused are ignored", []step{
			{0, "burst", true, 30}, {1, "burst", true, 30}, {29, "fail", true, 30}, {30.1, "check", false, 0}, {31, "fail", false, 0},
		}},
		{"a probe restores early and keeps the doubling", []step{
			{0, "burst", true, 30}, {5, "probe", false, 0}, {6, "burst", true, 60},
		}},
		// Restored at 91.002 s, tripped again 298.998 s later: doubles.
		// Restored at 510.002 s, tripped 300.998 s later: starts over.
		{"staying healthy for 300 s resets the doubling", []step{
			{0, "burst", true, 30}, {31, "burst", true, 60}, {91 + 299, "burst", true, 120}, {511, "check", false, 0}, {511 + 300, "burst", true, 30},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := NewMonitor(2, MonitorOptions{})
			for _, s := range c.steps {
				now := t0.Add(time.Duration(s.at * float64(time.Second)))
				switch s.op {
				case "fail":
					m.Fail(1, now)
				case "burst":
					for k := range 3 {
						now = t0.Add(time.Duration(s.at*float64(time.Second)) + time.Duration(k)*time.Millisecond)
						m.Fail(1, now)
					}
				case "probe":
					m.ProbeOK(1, now)
				}
				if got := m.Paused(1, now); got != s.paused {
					t.Fatalf("at %vs after %s: paused %v, want %v", s.at, s.op, got, s.paused)
				}
				if s.cooldown != 0 && m.Cooldown(1) != time.Duration(s.cooldown*float64(time.Second)) {
					t.Fatalf("at %vs after %s: cooldown %v, want %vs", s.at, s.op, m.Cooldown(1), s.cooldown)
				}
				if m.Paused(0, now) || m.Errors(0) != 0 {
					t.Fatalf("rail 0 touched")
				}
			}
		})
	}
}

// Completions reaped together (same time) make one bandwidth sample, so a
// batch does not read as an infinitely fast rail.
func TestBatchedCompletionsOneSample(t *testing.T) {
	s := New([]Rail{{"a", -1, 8}}, Options{EWMAAlpha: 1}) // 1 GB/s nominal
	for range 4 {
		s.Sent(0, MiB, t0)
	}
	at := t0.Add(4 * time.Millisecond)
	for range 4 {
		s.Done(0, MiB, t0, at, true)
	}
	s.Pick(MiB, -1, at.Add(time.Nanosecond)) // time moved on: the sample closes
	want := 4 * MiB / 0.004 * 8 / 1e9
	if got := s.Stats(at)[0].EWMAGbps; math.Abs(got-want) > 1e-6*want {
		t.Errorf("EWMA %.3f Gbps, want %.3f", got, want)
	}
}

func TestNoAllocations(t *testing.T) {
	s := New([]Rail{{"a", 0, 100}, {"b", 0, 100}, {"c", 1, 100}, {"d", 1, 100}}, Options{})
	now := t0
	n := testing.AllocsPerRun(1000, func() {
		i := s.Pick(MiB, 0, now)
		s.Sent(i, MiB, now)
		start := now
		now = now.Add(100 * time.Microsecond)
		s.Done(i, MiB, start, now, true)
	})
	if n != 0 {
		t.Errorf("%v allocations per Pick+Sent+Done, want 0", n)
	}
}

func BenchmarkPickSentDone(b *testing.B) {
	rails := make([]Rail, 8)
	for i := range rails {
		rails[i] = Rail{Name: "r", NUMANode: i % 2, NominalGbps: 100}
	}
	s := New(rails, Options{})
	now := t0
	var ring [16]struct {
		rail  int
		start time.Time
	}
	b.ReportAllocs()
	for k := 0; b.Loop(); k++ {
		slot := &ring[k%len(ring)]
		if k >= len(ring) {
			s.Done(slot.rail, MiB, slot.start, now, k%1000 != 0)
		}
		i := s.Pick(MiB, k%2, now)
		if i < 0 {
			i = 0
		}
		s.Sent(i, MiB, now)
		slot.rail, slot.start = i, now
		now = now.Add(10 * time.Microsecond)
	}
}

func TestPickAmongAndForget(t *testing.T) {
	now := time.Unix(1000, 0)
	s := New([]Rail{{Name: "a", NUMANode: -1}, {Name: "b", NUMANode: -1}, {Name: "c", NUMANode: -1}}, Options{ProbeShare: -1})
	for range 20 {
		i := s.PickAmong(1<<20, -1, 1<<2, now)
		if i != 2 {
			t.Fatalf("PickAmong(mask rail 2) = %d", i)
		}
		s.Sent(i, 1<<20, now)
	}
	if got := s.Stats(now)[2].InFlight; got != 20<<20 {
		t.Fatalf("in flight on rail 2 = %d, want %d", got, 20<<20)
	}
	// Rail 2 is loaded: an unrestricted pick avoids it.
	if i := s.Pick(1<<20, -1, now); i == 2 {
		t.Fatalf("Pick chose the loaded rail 2")
	}
	s.Forget(2, 20<<20)
	st := s.Stats(now)[2]
	if st.InFlight != 0 || st.Errors != 0 || st.Bytes != 0 {
		t.Fatalf("after Forget: %+v, want nothing in flight, no errors, no bytes", st)
	}
	// Pausing the only allowed rail leaves nothing to pick.
	for range 3 {
		s.Done(0, 0, now, now, false)
	}
	if i := s.PickAmong(1, -1, 1<<0, now); i != -1 {
		t.Fatalf("PickAmong(paused rail 0) = %d, want -1", i)
	}
}

// Slices that ran side by side on one rail (two connections) complete a
// little apart: the estimate is their rate together, not one slice over
// the few microseconds between them.
func TestParallelCompletionsOneRate(t *testing.T) {
	s := New([]Rail{{"a", -1, 0}}, Options{EWMAAlpha: 1})
	for range 8 {
		s.Sent(0, MiB, t0)
	}
	var at time.Time
	for k := 1; k <= 4; k++ {
		at = t0.Add(time.Duration(k) * time.Millisecond)
		s.Done(0, MiB, t0, at, true)
		s.Done(0, MiB, t0, at.Add(5*time.Microsecond), true)
	}
	s.Pick(MiB, -1, at.Add(time.Millisecond))
	want := 2 * MiB / 0.001 * 8 / 1e9 // two slices a millisecond
	if got := s.Stats(at)[0].EWMAGbps; math.Abs(got-want) > 0.25*want {
		t.Errorf("EWMA %.3f Gb/s, want about %.3f", got, want)
	}
}

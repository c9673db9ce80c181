package cpuprobe

import (
	"testing"
	"time"
)

// TestRoundTrip: between two allowed CPUs the round trip is measured in
// both directions (a positive time, under a bound that only a broken
// probe reaches: a cache line moves in well under a microsecond, and a
// loaded machine's slices stretch the median batch, not past a
// millisecond a round trip); a CPU that does not exist, or one paired
// with itself, is refused with an error, not waited on.
func TestRoundTrip(t *testing.T) {
	cpus, err := Allowed()
	if err != nil {
		t.Fatal(err)
	}
	if len(cpus) < 2 {
		t.Fatalf("this test needs two CPUs; the process may use %v", cpus)
	}
	for _, p := range [][2]int{{cpus[0], cpus[1]}, {cpus[1], cpus[0]}} {
		d, err := RoundTrip(p[0], p[1], 5000, 10*time.Second)
		if err != nil {
			t.Fatalf("CPUs %d and %d: %v", p[0], p[1], err)
		}
		if d <= 0 || d > time.Millisecond {
			t.Fatalf("CPUs %d and %d: a round trip of %v", p[0], p[1], d)
		}
	}
	if _, err := RoundTrip(cpus[0], 1<<20, 1000, time.Second); err == nil {
		t.Fatal("a CPU that does not exist was pinned")
	}
	if _, err := RoundTrip(cpus[0], cpus[0], 1000, time.Second); err == nil {
		t.Fatal("a CPU paired with itself was measured")
	}
}

// TestSurvey: one pair per other CPU, up to the bound, all from the first.
func TestSurvey(t *testing.T) {
	cpus, err := Allowed()
	if err != nil {
		t.Fatal(err)
	}
	pairs, err := Survey(cpus, 3, 5000, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if want := min(len(cpus)-1, 3); len(pairs) != want {
		t.Fatalf("%d pairs from %d CPUs, want %d", len(pairs), len(cpus), want)
	}
	for i, p := range pairs {
		if p.A != cpus[0] || p.B != cpus[i+1] || p.RTT <= 0 {
			t.Fatalf("pair %d: %+v", i, p)
		}
	}
	if pairs, err := Survey(cpus[:1], 3, 5000, time.Second); err != nil || pairs != nil {
		t.Fatalf("one CPU: %v, %v; want no pair", pairs, err)
	}
}

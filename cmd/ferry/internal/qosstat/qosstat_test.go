package qosstat

import (
	"math"
	"testing"
	"time"
)

func us(n ...int) []time.Duration {
	out := make([]time.Duration, len(n))
	for i, x := range n {
		out[i] = time.Duration(x) * time.Microsecond
	}
	return out
}

// TestPercentileNearestRank: known answers of the nearest-rank method on
// small samples and on 1..1000.
func TestPercentileNearestRank(t *testing.T) {
	thousand := make([]time.Duration, 1000)
	for i := range thousand {
		thousand[i] = time.Duration(i+1) * time.Microsecond
	}
	for _, tc := range []struct {
		sample []time.Duration
		p      float64
		want   time.Duration
	}{
		{nil, 0.5, 0},
		{us(7), 0.5, 7 * time.Microsecond},
		{us(7), 0.999, 7 * time.Microsecond},
		{us(1, 2, 3, 4), 0.5, 2 * time.Microsecond},  // rank ceil(2) = 2
		{us(1, 2, 3, 4), 0.51, 3 * time.Microsecond}, // rank ceil(2.04) = 3
		{us(1, 2, 3, 4), 0, 1 * time.Microsecond},
		{us(1, 2, 3, 4), 1, 4 * time.Microsecond},
		{us(1, 2, 3, 4), 1.5, 4 * time.Microsecond},
		{us(1, 2, 3, 4), -1, 1 * time.Microsecond},
		{thousand, 0.50, 500 * time.Microsecond},
		{thousand, 0.99, 990 * time.Microsecond},
		{thousand, 0.999, 999 * time.Microsecond},
		{thousand[:100], 0.99, 99 * time.Microsecond},
		{thousand[:100], 0.999, 100 * time.Microsecond},
	} {
		if got := Percentile(tc.sample, tc.p); got != tc.want {
			t.Errorf("Percentile(%d samples, %v) = %v, want %v", len(tc.sample), tc.p, got, tc.want)
		}
	}
}

// TestSummarize sorts its sample and keeps p50 <= p99 <= p999 <= max.
func TestSummarize(t *testing.T) {
	s := us(9, 1, 5, 3, 7, 2, 8, 4, 6, 10)
	l := Summarize(s)
	if l.N != 10 || l.P50 != 5*time.Microsecond || l.P99 != 10*time.Microsecond || l.P999 != 10*time.Microsecond || l.Max != 10*time.Microsecond {
		t.Fatalf("Summarize = %+v, want n 10, p50 5us, p99 p999 max 10us", l)
	}
	for i := 1; i < len(s); i++ {
		if s[i] < s[i-1] {
			t.Fatalf("sample not sorted after Summarize: %v", s)
		}
	}
	if z := Summarize(nil); z != (Latency{}) {
		t.Fatalf("Summarize(nil) = %+v, want zero", z)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-12 }

// TestJain: equal shares give 1, one taker of n gives 1/n, and the
// textbook example (1, 2, 3) gives 36/42.
func TestJain(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{
		{[]float64{5, 5, 5, 5}, 1},
		{[]float64{7}, 1},
		{[]float64{10, 0, 0, 0}, 0.25},
		{[]float64{1, 2, 3}, 36.0 / 42.0},
		{[]float64{3, 1}, 16.0 / 20.0},
		{nil, 0},
		{[]float64{0, 0}, 0},
		{[]float64{1, -1}, 0},
		{[]float64{1, math.NaN()}, 0},
		{[]float64{1, math.Inf(1)}, 0},
	} {
		if got := Jain(tc.xs); !near(got, tc.want) {
			t.Errorf("Jain(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
}

// TestWeightedJain: tenants weighted 3:1 that got 3:1 of the bytes are
// perfectly fair; 1:1 under 3:1 weights is the 0.8 of (1/3, 1).
func TestWeightedJain(t *testing.T) {
	w := []float64{3, 1}
	for _, tc := range []struct {
		got, weight []float64
		want        float64
	}{
		{[]float64{300, 100}, w, 1},
		{[]float64{200, 200}, w, 0.8},
		{[]float64{100, 300}, w, 100.0 / 164.0}, // (1, 9) after weighting
		{[]float64{1, 1}, []float64{1}, 0},
		{[]float64{1, 1}, []float64{1, 0}, 0},
		{[]float64{1, 1}, []float64{1, -2}, 0},
	} {
		if got := WeightedJain(tc.got, tc.weight); !near(got, tc.want) {
			t.Errorf("WeightedJain(%v, %v) = %v, want %v", tc.got, tc.weight, got, tc.want)
		}
	}
}

func TestLeakage(t *testing.T) {
	if r, ok := Leakage(300*time.Microsecond, 100*time.Microsecond); !ok || !near(r, 3) {
		t.Errorf("Leakage(300us, 100us) = %v, %v; want 3, true", r, ok)
	}
	if r, ok := Leakage(90*time.Microsecond, 100*time.Microsecond); !ok || !near(r, 0.9) {
		t.Errorf("Leakage(90us, 100us) = %v, %v; want 0.9, true", r, ok)
	}
	if _, ok := Leakage(time.Millisecond, 0); ok {
		t.Error("Leakage with nothing alone to compare with said ok")
	}
}

func TestAttainment(t *testing.T) {
	for _, tc := range []struct {
		met, total int
		want       float64
		ok         bool
	}{
		{9, 10, 0.9, true}, {0, 4, 0, true}, {4, 4, 1, true}, {5, 4, 1, true}, {0, 0, 0, false},
	} {
		got, ok := Attainment(tc.met, tc.total)
		if ok != tc.ok || !near(got, tc.want) {
			t.Errorf("Attainment(%d, %d) = %v, %v; want %v, %v", tc.met, tc.total, got, ok, tc.want, tc.ok)
		}
	}
}

func TestSpreadOf(t *testing.T) {
	xs := []float64{3, 1, 2}
	if s := SpreadOf(xs); s != (Spread{Median: 2, Min: 1, Max: 3, N: 3}) {
		t.Errorf("SpreadOf(3 1 2) = %+v", s)
	}
	if xs[0] != 3 || xs[1] != 1 {
		t.Errorf("SpreadOf reordered its input: %v", xs)
	}
	if s := SpreadOf([]float64{4, 1, 3, 2}); s != (Spread{Median: 2.5, Min: 1, Max: 4, N: 4}) {
		t.Errorf("SpreadOf(4 1 3 2) = %+v", s)
	}
	if s := SpreadOf(nil); s != (Spread{}) {
		t.Errorf("SpreadOf(nil) = %+v", s)
	}
}

func TestShare(t *testing.T) {
	got := Share([]float64{3, 1})
	if !near(got[0], 0.75) || !near(got[1], 0.25) {
		t.Errorf("Share(3, 1) = %v", got)
	}
	if got := Share([]float64{0, 0}); got[0] != 0 || got[1] != 0 {
		t.Errorf("Share(0, 0) = %v", got)
	}
}

// TestSteadyOf: known answers of the steady rate of a phase's
// completions: the ramp, the first batch's bytes and the tail after the
// phase's end are left out, so a paced stream gives its pace exactly.
func TestSteadyOf(t *testing.T) {
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	// paced: a 16 MiB batch every 80 ms from 35 ms (its ramp) to past
	// the 1 s end, then two in the tail.
	var paced []Completion
	for at := ms(35); at <= ms(1150); at += ms(80) {
		paced = append(paced, Completion{At: at, Bytes: 16 << 20})
	}
	for _, tc := range []struct {
		name  string
		cs    []Completion
		end   time.Duration
		bytes uint64
		span  time.Duration
		rate  float64 // bytes/s; 0: none
	}{
		{"none", nil, time.Second, 0, 0, 0},
		{"one", []Completion{{ms(10), 100}}, time.Second, 0, 0, 0},
		{"all after the end", []Completion{{ms(1100), 100}, {ms(1200), 100}}, time.Second, 0, 0, 0},
		{"two at once", []Completion{{ms(10), 100}, {ms(10), 100}}, time.Second, 0, 0, 0},
		{"even", []Completion{{ms(0), 1e6}, {ms(10), 1e6}, {ms(20), 1e6}, {ms(30), 1e6}}, time.Second, 3e6, ms(30), 1e8},
		// unsorted input, a tail completion (at 1.05 s) left out
		{"unsorted, tail", []Completion{{ms(1050), 1e6}, {ms(20), 1e6}, {ms(0), 1e6}, {ms(10), 1e6}}, time.Second, 2e6, ms(20), 1e8},
		// a free first batch (a burst) moves 5 MB at once, then 1 MB
		// every 10 ms: the burst's bytes are before the span
		{"burst first", []Completion{{ms(1), 5e6}, {ms(11), 1e6}, {ms(21), 1e6}}, time.Second, 2e6, ms(20), 1e8},
		// 13 completions at 35..995 ms count 12 batches over 960 ms
		{"paced 16 MiB", paced, time.Second, 12 * 16 << 20, ms(960), 12 * 16 << 20 / 0.960},
		{"end on a completion", []Completion{{ms(0), 1}, {ms(500), 7}, {time.Second, 9}}, time.Second, 16, time.Second, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := SteadyOf(tc.cs, tc.end)
			if s.Bytes != tc.bytes || s.Span != tc.span {
				t.Fatalf("SteadyOf = %d bytes over %v, want %d over %v", s.Bytes, s.Span, tc.bytes, tc.span)
			}
			r, ok := s.Rate()
			if ok != (tc.rate != 0) || math.Abs(r-tc.rate) > 1e-6*tc.rate {
				t.Fatalf("Rate = %v, %v; want %v", r, ok, tc.rate)
			}
		})
	}
	// Phases add up before the rate: 3 MB over 30 ms and 1 MB over 20
	// ms is 80 MB/s, not the mean of 100 and 50.
	s := Steady{Bytes: 3e6, Span: ms(30)}.Add(Steady{Bytes: 1e6, Span: ms(20)})
	if r, ok := s.Rate(); !ok || r != 8e7 {
		t.Fatalf("added rate %v, %v, want 8e7", r, ok)
	}
}

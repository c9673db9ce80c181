package qosstat

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the nearest-rank p-quantile of sorted, which must be
// in ascending order: the smallest sample that at least p of the samples
// are at or below (rank ceil(p*n), 1-based). p is clamped to [0, 1]; p 0
// gives the minimum, p 1 the maximum. An empty sample gives 0.
//
// Nearest rank returns a sample that was measured, never an
// interpolation, and is monotone in p, so p50 <= p99 <= p999 always.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if math.IsNaN(p) || p <= 0 {
		return sorted[0]
	}
	if p >= 1 {
		return sorted[n-1]
	}
	// A small tolerance keeps p*n that is whole in exact arithmetic
	// (0.99*100) from rounding up a rank in floating point.
	rank := int(math.Ceil(p*float64(n) - 1e-9))
	if rank < 1 {
		rank = 1
	}
	return sorted[rank-1]
}

// Latency is the summary of one latency sample.
type Latency struct {
	N              int
	P50, P99, P999 time.Duration
	Max            time.Duration
}

// Summarize sorts sample in place and returns its percentiles.
func Summarize(sample []time.Duration) Latency {
	slices.Sort(sample)
	l := Latency{N: len(sample), P50: Percentile(sample, 0.50), P99: Percentile(sample, 0.99), P999: Percentile(sample, 0.999)}
	if len(sample) > 0 {
		l.Max = sample[len(sample)-1]
	}
	return l
}

// Jain returns Jain's fairness index of xs, (sum x)^2 / (n * sum x^2): 1
// when every x is equal, 1/n when one x holds everything. It is 0 for an
// empty list, for one whose values are all 0, and for one with a negative
// or non-finite value: no share can be judged from those.
func Jain(xs []float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		if x < 0 || math.IsNaN(x) || math.IsInf(x, 0) {
			return 0
		}
		sum += x
		sq += x * x
	}
	if len(xs) == 0 || sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// WeightedJain is Jain's index of each got[i] divided by weight[i]: 1
// when every tenant got exactly its weighted share. It is 0 when the
// lists differ in length or a weight is not positive.
func WeightedJain(got, weight []float64) float64 {
	if len(got) != len(weight) {
		return 0
	}
	xs := make([]float64, len(got))
	for i := range got {
		if !(weight[i] > 0) || math.IsInf(weight[i], 0) {
			return 0
		}
		xs[i] = got[i] / weight[i]
	}
	return Jain(xs)
}

// Leakage is how much a load raised a latency: loaded / alone, so 1 is
// perfect isolation and 2 means the p99 doubled. ok is false when alone
// is not positive (nothing to compare with).
func Leakage(loaded, alone time.Duration) (ratio float64, ok bool) {
	if alone <= 0 {
		return 0, false
	}
	return float64(loaded) / float64(alone), true
}

// Attainment is the share of deadlines met, met / total; ok is false
// when no request had a deadline. met above total is clamped to 1.
func Attainment(met, total int) (share float64, ok bool) {
	if total <= 0 {
		return 0, false
	}
	if met > total {
		met = total
	}
	if met < 0 {
		met = 0
	}
	return float64(met) / float64(total), true
}

// Spread is a figure measured over several rounds.
type Spread struct {
	Median, Min, Max float64
	N                int
}

// SpreadOf returns the median, minimum and maximum of xs (the median of
// an even count is the mean of the middle two). It leaves xs unchanged;
// an empty list gives the zero Spread.
func SpreadOf(xs []float64) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return Spread{Median: med, Min: s[0], Max: s[n-1], N: n}
}

// Share returns each x as a fraction of their sum (all 0 when the sum
// is not positive).
func Share(xs []float64) []float64 {
	var sum float64
	for _, x := range xs {
		sum += x
	}
	out := make([]float64, len(xs))
	if !(sum > 0) {
		return out
	}
	for i, x := range xs {
		out[i] = x / sum
	}
	return out
}

// Completion is one batch that completed: when, counted from the start
// of its phase, and the bytes it moved.
type Completion struct {
	At    time.Duration
	Bytes uint64
}

// Steady is bytes moved over a span of time, in the steady part of a
// phase; Steadys of several phases add up (Add) before the rate is
// taken.
type Steady struct {
	Bytes uint64
	Span  time.Duration
}

// Add returns s and o together.
func (s Steady) Add(o Steady) Steady { return Steady{Bytes: s.Bytes + o.Bytes, Span: s.Span + o.Span} }

// Rate returns the bytes per second; ok is false when the span is not
// positive (fewer than two completions were seen).
func (s Steady) Rate() (bytesPerSec float64, ok bool) {
	if s.Span <= 0 {
		return 0, false
	}
	return float64(s.Bytes) / s.Span.Seconds(), true
}

// SteadyOf is the steady part of a phase's completions: the bytes of
// those that completed at or before end (when the phase stopped
// submitting), except the first, over the time from the first to the
// last of them. The phase's ramp (the time to the first completion,
// during which nothing completes) and its tail (the batches still in
// flight at end, which complete while the load winds down) are left out,
// and so is the first batch's own bytes: what it moved happened before
// the span starts. For a stream paced by a rate cap (one batch every
// bytes/cap) the result is the cap, whatever the batch size, where bytes
// over the whole phase are off by up to a batch at each end.
//
// It sorts cs by time in place. Fewer than two completions at or before
// end give the zero Steady.
func SteadyOf(cs []Completion, end time.Duration) Steady {
	slices.SortFunc(cs, func(a, b Completion) int {
		switch {
		case a.At < b.At:
			return -1
		case a.At > b.At:
			return 1
		}
		return 0
	})
	n := 0
	for n < len(cs) && cs[n].At <= end {
		n++
	}
	if n < 2 {
		return Steady{}
	}
	var s Steady
	for _, c := range cs[1:n] {
		s.Bytes += c.Bytes
	}
	s.Span = cs[n-1].At - cs[0].At
	if s.Span <= 0 {
		return Steady{}
	}
	return s
}

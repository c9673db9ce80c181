package supervisor

import (
	"time"

	"github.com/ferrydev/ferry/host/progress"
)

// Contract is the rule a plugin's completions are held to. The lanes
// count what the tracker refuses (progress.Verdict: unknown tokens,
// duplicates, over-long byte counts); a run that commits Violations of
// them within Within is faulty, and is killed and restarted as a stalled
// one is, which fails its tasks over. Violations 0 only counts and logs.
type Contract struct {
	Violations uint64
	Within     time.Duration
}

// contractWindow applies a Contract to one run from its violation count,
// sampled at each look (so the window is as fine as the looks).
type contractWindow struct {
	rule    Contract
	samples []countAt // oldest first: the newest at or before the window's start, then the rest
}

type countAt struct {
	at time.Time
	n  uint64
}

// observe records the run's violations so far, total, at now, and returns
// how many fell within the rule's window and whether the run is faulty.
// A run starts at 0: with no look older than the window, every violation
// counts.
func (w *contractWindow) observe(now time.Time, total uint64) (uint64, bool) {
	start := now.Add(-w.rule.Within)
	w.samples = append(w.samples, countAt{now, total})
	k := 0
	for k+1 < len(w.samples) && !w.samples[k+1].at.After(start) {
		k++
	}
	if k > 0 {
		w.samples = append(w.samples[:0], w.samples[k:]...)
	}
	var base uint64
	if s := w.samples[0]; !s.at.After(start) {
		base = s.n
	}
	in := total - base
	return in, w.rule.Violations > 0 && in >= w.rule.Violations
}

// violations sums the contract violations of lanes.
func violations(lanes []*progress.Lane) progress.Violations {
	var v progress.Violations
	for _, l := range lanes {
		v = v.Add(l.Violations())
	}
	return v
}

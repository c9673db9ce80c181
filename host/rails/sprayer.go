package rails

import (
	"math"
	"time"
)

// Rail is one path a transport can use, as configured or probed.
type Rail struct {
	Name string
	// NUMANode is the node the rail's NIC is attached to; -1 when unknown.
	NUMANode int
	// NominalGbps seeds the bandwidth estimate; 0 when unknown.
	NominalGbps float64
}

// Options configure a Sprayer. Zero fields take the defaults.
type Options struct {
	// ProbeShare is the share of picks that may go to a rail which has
	// been idle, whatever its score, so that a rail that recovered is
	// measured again. Default 0.02 (every 50th pick); negative disables.
	ProbeShare float64
	// NUMAPenalty multiplies the expected finish time of a rail on another
	// NUMA node than the request's memory. Default 1.3; values below 1
	// count as 1 (no penalty).
	NUMAPenalty float64
	// EWMAAlpha is the weight of a bandwidth sample that spans EWMASpan
	// of busy time, in (0, 1]; a sample spanning d weighs
	// 1 - (1-EWMAAlpha)^(d/EWMASpan), so that the estimate is a rate over
	// time, not an average of per-sample rates: completions of parallel
	// connections a few ms apart, or a jittered reap, cut the same busy
	// time into short samples of wild rates, and weighing those like long
	// ones made the estimate swing. Default 0.25; 1 takes every sample
	// whole. (TENT's bandwidth_learning_rate weighs the old value
	// instead.)
	EWMAAlpha float64
	// EWMASpan: see EWMAAlpha. Default 50 ms (with the default alpha the
	// estimate forgets with a time constant of about 175 ms of busy time).
	EWMASpan time.Duration
	// Monitor configures rail health.
	Monitor MonitorOptions
}

const (
	defaultProbeShare  = 0.02
	defaultNUMAPenalty = 1.3
	defaultEWMAAlpha   = 0.25
	defaultEWMASpan    = 50 * time.Millisecond
	// unknownBandwidth seeds every rail when no rail states a nominal
	// bandwidth: only the ratios between rails matter to Pick.
	unknownBandwidth = 10e9 / 8
)

// RailStats is one rail's counters.
type RailStats struct {
	Name     string
	Bytes    uint64 // bytes of slices that completed successfully
	Slices   uint64 // slices that completed successfully
	InFlight uint64 // bytes sent and not yet done
	EWMAGbps float64
	Errors   uint64 // failed slices
	Paused   bool
}

// Sprayer chooses a rail for each slice. See the package documentation.
type Sprayer struct {
	rails   []rail
	mon     *Monitor
	penalty float64
	// decay is ln(1-EWMAAlpha) per second of sample: a sample spanning d
	// weighs 1 - exp(decay*d). -Inf when EWMAAlpha is 1.
	decay      float64
	probeEvery uint64 // 0: no probes
	seq        uint64 // picks so far
}

type rail struct {
	Rail
	inFlight uint64
	bytes    uint64
	slices   uint64
	bw       float64 // EWMA, bytes per second

	lastPick uint64 // seq of the last pick; 0 = never

	// Bandwidth is measured over busy time: a completion's sample runs
	// from when its slice started or the rail's previous completion,
	// whichever is later, so the time a slice waited behind others on the
	// same rail is not counted against the rail. Completions reported with
	// the same time (one reap of a completion ring) form one sample.
	grpOpen  bool
	grpBytes uint64
	grpStart time.Time // earliest start in the group
	grpEnd   time.Time // the group's completion time
	lastEnd  time.Time // end of the previous sample or failure
}

// New returns a sprayer over rails, numbered by their index.
func New(rails []Rail, opts Options) *Sprayer {
	s := &Sprayer{
		rails:   make([]rail, len(rails)),
		mon:     NewMonitor(len(rails), opts.Monitor),
		penalty: opts.NUMAPenalty,
	}
	switch {
	case s.penalty == 0:
		s.penalty = defaultNUMAPenalty
	case s.penalty < 1:
		s.penalty = 1
	}
	alpha := opts.EWMAAlpha
	if alpha <= 0 || alpha > 1 {
		alpha = defaultEWMAAlpha
	}
	span := opts.EWMASpan
	if span <= 0 {
		span = defaultEWMASpan
	}
	s.decay = math.Log1p(-alpha) / span.Seconds()
	share := opts.ProbeShare
	if share == 0 {
		share = defaultProbeShare
	}
	if share > 0 {
		s.probeEvery = uint64(max(1, math.Round(1/min(share, 1))))
	}
	// A rail of unknown bandwidth starts at the mean of the known ones.
	var sum float64
	var known int
	for _, r := range rails {
		if r.NominalGbps > 0 {
			sum += r.NominalGbps
			known++
		}
	}
	seed := float64(unknownBandwidth)
	if known > 0 {
		seed = sum / float64(known) * 1e9 / 8
	}
	for i, r := range rails {
		s.rails[i].Rail = r
		s.rails[i].bw = seed
		if r.NominalGbps > 0 {
			s.rails[i].bw = r.NominalGbps * 1e9 / 8
		}
	}
	return s
}

// Len returns the number of rails.
func (s *Sprayer) Len() int { return len(s.rails) }

// Monitor returns the rail health monitor the sprayer feeds.
func (s *Sprayer) Monitor() *Monitor { return s.mon }

// Pick returns the rail that should carry a slice of bytes whose local
// memory is on NUMA node numa (-1: unknown), or -1 when every rail is
// paused. The caller follows a pick with Sent, or drops it.
func (s *Sprayer) Pick(bytes uint64, numa int, now time.Time) int {
	return s.PickAmong(bytes, numa, 0, now)
}

// PickAmong is Pick restricted to the rails whose bit is set in allowed
// (bit i for rail i); allowed 0 allows every rail.
func (s *Sprayer) PickAmong(bytes uint64, numa int, allowed uint64, now time.Time) int {
	n := len(s.rails)
	if n == 0 {
		return -1
	}
	s.seq++
	for i := range s.rails {
		s.rails[i].closeGroup(now, s.decay)
	}
	if s.probeEvery > 0 && s.seq%s.probeEvery == 0 {
		if i := s.probe(allowed, now); i >= 0 {
			s.rails[i].lastPick = s.seq
			return i
		}
	}
	// Start the scan at a rotating rail so that ties take turns.
	best, bestScore := -1, math.Inf(1)
	first := int(s.seq % uint64(n))
	for k := range n {
		i := first + k
		if i >= n {
			i -= n
		}
		if !isAllowed(allowed, i) || s.mon.Paused(i, now) {
			continue
		}
		r := &s.rails[i]
		score := float64(r.inFlight+bytes) / r.bw
		if numa >= 0 && r.NUMANode >= 0 && r.NUMANode != numa {
			score *= s.penalty
		}
		if score < bestScore {
			best, bestScore = i, score
		}
	}
	if best >= 0 {
		s.rails[best].lastPick = s.seq
	}
	return best
}

// probe returns the unpaused, idle rail that was picked longest ago, if
// it was not picked within the last probeEvery picks; else -1. Only idle
// rails are probed so that a rail that is still slow holds at most one
// probe slice.
func (s *Sprayer) probe(allowed uint64, now time.Time) int {
	best := -1
	for i := range s.rails {
		r := &s.rails[i]
		if !isAllowed(allowed, i) || r.inFlight != 0 || s.mon.Paused(i, now) || r.lastPick+s.probeEvery > s.seq {
			continue
		}
		if best < 0 || r.lastPick < s.rails[best].lastPick {
			best = i
		}
	}
	return best
}

// Sent records that a slice of bytes went to rail at now.
func (s *Sprayer) Sent(rail int, bytes uint64, now time.Time) {
	r := &s.rails[rail]
	r.closeGroup(now, s.decay)
	r.inFlight += bytes
}

// Done records that a slice of bytes sent to rail at start completed at
// now. A success feeds the rail's bandwidth estimate; a failure counts as
// an error on the rail and may pause it.
func (s *Sprayer) Done(rail int, bytes uint64, start, now time.Time, ok bool) {
	r := &s.rails[rail]
	r.inFlight -= min(bytes, r.inFlight)
	r.closeGroup(now, s.decay)
	if !ok {
		s.mon.Fail(rail, now)
		r.commit(s.decay)
		if now.After(r.lastEnd) {
			r.lastEnd = now
		}
		return
	}
	r.bytes += bytes
	r.slices++
	if !r.grpOpen {
		r.grpOpen, r.grpBytes, r.grpStart, r.grpEnd = true, 0, start, now
	} else if now.After(r.grpEnd) {
		r.grpEnd = now // a sample shorter than minSample grows
	}
	// A completion reported earlier than the open group (the caller's
	// times went backwards) is folded into it.
	r.grpBytes += bytes
	if start.Before(r.grpStart) {
		r.grpStart = start
	}
}

// Forget drops bytes sent to rail that will never be reported done (the
// plugin that carried them died), without counting an error.
func (s *Sprayer) Forget(rail int, bytes uint64) {
	r := &s.rails[rail]
	r.inFlight -= min(bytes, r.inFlight)
}

func isAllowed(mask uint64, i int) bool { return mask == 0 || (i < 64 && mask&(1<<i) != 0) }

// ProbeOK records a successful probe of rail at now; see Monitor.ProbeOK.
func (s *Sprayer) ProbeOK(rail int, now time.Time) { s.mon.ProbeOK(rail, now) }

// closeGroup commits the open sample once time has moved past it and it
// spans at least minSample (or the rail went idle): completions of slices
// that ran side by side (several connections on one rail) arrive a little
// apart, and a sample of one of them alone would read as a rail far
// faster than it is.
func (r *rail) closeGroup(now time.Time, decay float64) {
	if !r.grpOpen || !now.After(r.grpEnd) {
		return
	}
	from := r.grpStart
	if r.lastEnd.After(from) {
		from = r.lastEnd
	}
	switch {
	case r.grpEnd.Sub(from) >= minSample:
		r.commit(decay)
	case r.inFlight != 0:
		// Too short yet: keep growing it.
	case !from.After(r.grpStart):
		// The rail went idle and the sample covers its whole busy
		// period (a request alone on it): its rate is the rail's.
		r.commit(decay)
	default:
		// The short tail of a busy period whose earlier part was
		// sampled: its slices ran alongside those, so alone it would
		// read far too fast. Drop it.
		r.grpOpen = false
		r.lastEnd = r.grpEnd
	}
}

// minSample is the shortest time a bandwidth sample spans while its rail
// stays busy.
const minSample = 2 * time.Millisecond

// commit folds the open sample into the rail's estimate, weighed by the
// busy time it spans (see Options.EWMAAlpha).
func (r *rail) commit(decay float64) {
	if !r.grpOpen {
		return
	}
	r.grpOpen = false
	from := r.grpStart
	if r.lastEnd.After(from) {
		from = r.lastEnd
	}
	r.lastEnd = r.grpEnd
	d := r.grpEnd.Sub(from)
	if d <= 0 || r.grpBytes == 0 {
		return
	}
	sample := float64(r.grpBytes) / d.Seconds()
	r.bw += -math.Expm1(decay*d.Seconds()) * (sample - r.bw)
}

// Stats returns every rail's counters at now.
func (s *Sprayer) Stats(now time.Time) []RailStats {
	out := make([]RailStats, len(s.rails))
	for i := range s.rails {
		r := &s.rails[i]
		out[i] = RailStats{
			Name: r.Name, Bytes: r.bytes, Slices: r.slices, InFlight: r.inFlight,
			EWMAGbps: r.bw * 8 / 1e9, Errors: s.mon.Errors(i), Paused: s.mon.Paused(i, now),
		}
	}
	return out
}

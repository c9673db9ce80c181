package metrics

import (
	"math/bits"

	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// RunTally is one lane poller's count of the requests that ended in its
// current run of completions (progress.Hook's RunEnded): their ends by
// transport, op, priority and state, their bytes and their end_to_end
// times, in plain integers that Flush adds to the meter's atomics once
// per run, for each kind of request the run ended (a run of a dozen
// completions of one kind makes a handful of atomic adds, not a dozen
// times four). It is its poller's alone, as the run is; nothing in it is
// exported until Flush, so a scrape sees a run's ends once the run is
// over (microseconds; a lane flushes before it looks for more or sleeps).
type RunTally struct {
	m     *Meter
	cells []tallyCell // by transport index, op, priority: tallyIndex
	dirty []uint16    // the cells counted in since the last Flush
}

// tallyCell is a run's count of one transport's requests of one op and
// priority.
type tallyCell struct {
	ended [len(stateLabels)]uint32
	bytes uint64
	e2e   [nBuckets + 1]uint32
	e2eNs uint64
	dirty bool
}

// NewRunTally returns an empty tally that flushes into m.
func (m *Meter) NewRunTally() *RunTally {
	return &RunTally{m: m, cells: make([]tallyCell, len(m.cells)*6), dirty: make([]uint16, 0, len(m.cells)*6)}
}

// RunTally returns run r's tally of m, making it on the run's first use
// (a lane keeps its run, and so its tally, from run to run).
func (m *Meter) RunTally(r *progress.Run) *RunTally {
	if t, ok := r.Tally.(*RunTally); ok && t.m == m {
		return t
	}
	t := m.NewRunTally()
	r.Tally = t
	return t
}

// Ended is Meter.Ended into the tally, with the request's end_to_end
// time (e2e nanoseconds; negative: not timed).
func (t *RunTally) Ended(p int32, op ring.Op, pr sdk.Priority, s progress.State, length uint64, e2e int64) {
	k := int(s) - 1
	if k < 0 || k >= len(stateLabels) {
		return
	}
	x := t.m.cell(p)*6 + opIndex(op)*3 + prioIndex(pr)
	c := &t.cells[x]
	if !c.dirty {
		c.dirty = true
		t.dirty = append(t.dirty, uint16(x))
	}
	c.ended[k]++
	if s == progress.Completed {
		c.bytes += length
	}
	if e2e >= 0 {
		c.e2e[bucketOf(e2e)]++
		c.e2eNs += uint64(e2e)
	}
}

// Flush adds what the tally counted to its meter and empties it.
func (t *RunTally) Flush() {
	for _, x := range t.dirty {
		c := &t.cells[x]
		mc := &t.m.cells[x/6]
		o, r := x%6/3, x%3
		for k, n := range c.ended {
			if n != 0 {
				mc.ended[o][r][k].Add(uint64(n))
			}
		}
		if c.bytes != 0 {
			mc.bytes[o][r].Add(c.bytes)
		}
		h := &mc.stages[SpanEndToEnd][o][r]
		for k, n := range c.e2e {
			if n != 0 {
				h.counts[k].Add(uint64(n))
			}
		}
		if c.e2eNs != 0 {
			h.sumNs.Add(c.e2eNs)
		}
		*c = tallyCell{}
	}
	t.dirty = t.dirty[:0]
}

// bucketOf is the index of the LatencyBuckets bucket of a sample of ns
// nanoseconds (nBuckets: above the last bound): the first bound at or
// above it. The bounds are 1 µs times powers of 4, so it is the base-4
// logarithm of the sample in whole microseconds, rounded up: a bit
// length, not a search (TestBucketOfSearches checks it against one).
func bucketOf(ns int64) int {
	if ns <= latencyBoundsNs[0] {
		return 0
	}
	us := (uint64(ns) + 999) / 1000 // ceil: ns <= 1000*4^k is us <= 4^k
	return min((bits.Len64(us-1)+1)/2, nBuckets)
}

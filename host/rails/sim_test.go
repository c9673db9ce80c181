package rails

import (
	"math"
	"time"
)

// t0 is the simulated clock's origin: simulated times are offsets from it.
var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// simRail is a rail's truth: a FIFO link with a bandwidth that may change
// over time and may fail the slices it completes.
type simRail struct {
	gbps      func(at time.Duration) float64
	fails     func(at time.Duration) bool // nil: never
	busyUntil time.Duration
}

func constGbps(g float64) func(time.Duration) float64 {
	return func(time.Duration) float64 { return g }
}

type simSlice struct {
	rail       int
	sent, done time.Duration
	ok         bool
}

// sim is a tiny discrete-event simulation: slices of a fixed size are
// submitted as fast as the window allows (or, with burst, a window's worth
// at a time once the previous burst has drained), each completes when its
// rail has served the slices queued before it, and the sprayer hears of
// every send and completion at its simulated time. A failed slice is sent
// again.
type sim struct {
	s      *Sprayer
	rails  []simRail
	slice  uint64
	window int
	burst  bool
	numa   int

	now    time.Duration
	flight []simSlice
	left   uint64 // bytes still to send; math.MaxUint64: endless

	sends  [][]time.Duration // per rail: when each slice was sent
	pauses []pause           // every pause the monitor started
}

type pause struct {
	rail      int
	at, until time.Duration
}

func newSim(s *Sprayer, rails []simRail, slice uint64, window int) *sim {
	return &sim{s: s, rails: rails, slice: slice, window: window, numa: -1,
		left: math.MaxUint64, sends: make([][]time.Duration, len(rails))}
}

func (m *sim) fill() {
	if m.burst && len(m.flight) > 0 {
		return
	}
	for len(m.flight) < m.window && m.left > 0 {
		now := t0.Add(m.now)
		i := m.s.Pick(m.slice, m.numa, now)
		if i < 0 {
			return
		}
		m.s.Sent(i, m.slice, now)
		r := &m.rails[i]
		start := max(m.now, r.busyUntil)
		service := time.Duration(float64(m.slice*8) / (r.gbps(start) * 1e9) * float64(time.Second))
		r.busyUntil = start + service
		ok := r.fails == nil || !r.fails(r.busyUntil)
		m.flight = append(m.flight, simSlice{rail: i, sent: m.now, done: r.busyUntil, ok: ok})
		m.sends[i] = append(m.sends[i], m.now)
		if m.left != math.MaxUint64 {
			m.left -= m.slice
		}
	}
}

// run advances the simulation to end, or until everything was sent and
// has completed. It returns the time of the last completion.
func (m *sim) run(end time.Duration) time.Duration {
	var last time.Duration
	for {
		m.fill()
		if len(m.flight) == 0 {
			if m.left == 0 {
				return last
			}
			// Every rail is paused: wait for the first to come back.
			next := end
			for i := range m.rails {
				if u := m.s.Monitor().PausedUntil(i).Sub(t0); u > m.now && u < next {
					next = u
				}
			}
			if next >= end {
				m.now = end
				return last
			}
			m.now = next
			continue
		}
		k := 0
		for j := range m.flight {
			if m.flight[j].done < m.flight[k].done {
				k = j
			}
		}
		sl := m.flight[k]
		if sl.done > end {
			m.now = end
			return last
		}
		m.flight[k] = m.flight[len(m.flight)-1]
		m.flight = m.flight[:len(m.flight)-1]
		m.now, last = sl.done, sl.done
		wasPaused := m.s.Monitor().Paused(sl.rail, t0.Add(m.now))
		m.s.Done(sl.rail, m.slice, t0.Add(sl.sent), t0.Add(m.now), sl.ok)
		if !sl.ok {
			if m.left != math.MaxUint64 {
				m.left += m.slice
			}
			if !wasPaused && m.s.Monitor().Paused(sl.rail, t0.Add(m.now)) {
				m.pauses = append(m.pauses, pause{sl.rail, m.now, m.s.Monitor().PausedUntil(sl.rail).Sub(t0)})
			}
		}
	}
}

// bytes returns every rail's delivered bytes.
func (m *sim) bytes() []uint64 {
	st := m.s.Stats(t0.Add(m.now))
	out := make([]uint64, len(st))
	for i := range st {
		out[i] = st[i].Bytes
	}
	return out
}

func share(b []uint64, i int) float64 {
	var sum uint64
	for _, x := range b {
		sum += x
	}
	return float64(b[i]) / float64(sum)
}

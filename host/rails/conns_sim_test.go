package rails

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// connSim simulates the shape of the multi-rail TCP test (host's
// TestMultiRailTCPOverVeth). Each rail is a link of a true bandwidth
// carried by conns connections: up to conns slices move at once, sharing
// the link's bandwidth equally (as TCP flows over one bottleneck do), and
// a slice sent to a rail whose connections are all busy waits for one,
// first come first served. Completions are reaped, not seen at once: the
// reaper wakes a jittered time after the first completion it has not
// reported and reports, with one time, every completion done by then;
// each completion ends the oldest slice sent to its rail, as the engine's
// Set does. Like `ferry bench --threads N`, each of threads clients
// writes one request of request bytes at a time, cut into slices, and
// sends the next at the reap that reports the last slice of the previous
// one, so that a request takes as long as its slowest rail. Everything runs
// on a simulated clock (float seconds from t0); jitter comes from a
// seeded RNG.
type connSim struct {
	gbps    []float64 // true bandwidth per rail
	conns   int
	slice   uint64
	request uint64 // bytes per request
	threads int
	// jitter: each reap comes jitterMin plus up to jitterSpan after the
	// completion that woke it.
	jitterMin, jitterSpan time.Duration
	seed                  uint64
}

type connSlice struct {
	thread int
	bits   float64 // still to move
}

type connResult struct {
	makespan time.Duration
	bytes    []uint64
	ewmaGbps []float64
}

// run moves warmup bytes and then total bytes over the rails in allowed
// (0: all), as the bench warms up before it measures, and returns how long
// the total took and what each rail carried of it.
func (c connSim) run(warmup, total uint64, allowed uint64) connResult {
	s := New(make([]Rail, len(c.gbps)), Options{})
	rng := rand.New(rand.NewPCG(c.seed, 0x5eed))
	now, before := c.phase(s, rng, 0, warmup, allowed)
	end, after := c.phase(s, rng, now, total, allowed)
	r := connResult{makespan: simTime(end).Sub(simTime(now))}
	st := s.Stats(simTime(end))
	for i := range st {
		r.bytes = append(r.bytes, after[i]-before[i])
		r.ewmaGbps = append(r.ewmaGbps, st[i].EWMAGbps)
	}
	return r
}

func simTime(sec float64) time.Time { return t0.Add(time.Duration(sec * 1e9)) }

// phase moves total bytes from now (seconds) until every slice was
// reported and returns when the last one completed and every rail's
// delivered bytes then.
func (c connSim) phase(s *Sprayer, rng *rand.Rand, now float64, total, allowed uint64) (float64, []uint64) {
	n := len(c.gbps)
	var (
		queue    = make([][]connSlice, n) // per rail: unfinished slices, the first conns moving
		sentAt   = make([][]float64, n)   // per rail: send times not yet ended by a completion
		unseen   []int                    // rails of completions not yet reported
		reapAt   float64
		left     = total
		last     float64
		out      = make([]int, c.threads) // slices in flight per thread
		finished []int                    // threads of the unseen completions
	)
	send := func(th int) {
		for k := uint64(0); k < c.request && left > 0; k += c.slice {
			at := simTime(now)
			i := s.PickAmong(c.slice, -1, allowed, at)
			s.Sent(i, c.slice, at)
			queue[i] = append(queue[i], connSlice{thread: th, bits: float64(c.slice * 8)})
			sentAt[i] = append(sentAt[i], now)
			out[th]++
			left -= min(left, c.slice)
		}
	}
	for th := range c.threads {
		send(th)
	}
	for {
		// The next event: a slice finishing on some rail, or the reap.
		next, busy := math.Inf(1), false
		for i, q := range queue {
			if a := min(len(q), c.conns); a > 0 {
				busy = true
				rate := c.gbps[i] * 1e9 / float64(a)
				for _, sl := range q[:a] {
					next = min(next, now+sl.bits/rate)
				}
			}
		}
		if !busy && len(unseen) == 0 {
			break
		}
		if len(unseen) > 0 {
			next = min(next, reapAt)
		}
		for i, q := range queue {
			a := min(len(q), c.conns)
			if a == 0 {
				continue
			}
			moved := c.gbps[i] * 1e9 / float64(a) * (next - now)
			kept := q[:0]
			for k, sl := range q {
				if k < a {
					sl.bits -= moved
				}
				if k < a && sl.bits < 1e-3 {
					if len(unseen) == 0 {
						reapAt = next + c.jitterMin.Seconds()
						if c.jitterSpan > 0 {
							reapAt += time.Duration(rng.Int64N(int64(c.jitterSpan))).Seconds()
						}
					}
					unseen = append(unseen, i)
					finished = append(finished, sl.thread)
					last = next
					continue
				}
				kept = append(kept, sl)
			}
			queue[i] = kept
		}
		now = next
		if len(unseen) == 0 || now < reapAt {
			continue
		}
		at := simTime(now)
		for k, i := range unseen {
			s.Done(i, c.slice, simTime(sentAt[i][0]), at, true)
			sentAt[i] = sentAt[i][1:]
			th := finished[k]
			if out[th]--; out[th] == 0 {
				send(th)
			}
		}
		unseen, finished = unseen[:0], finished[:0]
	}
	var bytes []uint64
	for _, x := range s.Stats(simTime(now)) {
		bytes = append(bytes, x.Bytes)
	}
	return last, bytes
}

// TestSprayParallelConnections: two rails, the slow one a quarter of the
// fast one's rate, served by parallel connections whose completions are
// reaped with jitter, as the tcp plugin's are on a loaded machine. The
// slow rail's share of the bytes stays near its share of the bandwidth
// (1/5), and both rails together move a fixed workload faster than the
// fast rail alone. Ideal: share 0.20, speed-up 1.25.
func TestSprayParallelConnections(t *testing.T) {
	const (
		fast, slow = 0.4, 0.1 // Gb/s, as in the netns test
		total      = 256 << 20
		warmup     = 64 << 20
	)
	cases := []struct {
		name       string
		conns      int
		jmin, jmax time.Duration
	}{
		{"1 connection, no jitter", 1, 0, 0},
		{"1 connection, 1-20ms jitter", 1, time.Millisecond, 20 * time.Millisecond},
		{"2 connections, no jitter", 2, 0, 0},
		{"2 connections, 1-5ms jitter", 2, time.Millisecond, 5 * time.Millisecond},
		{"2 connections, 1-20ms jitter", 2, time.Millisecond, 20 * time.Millisecond},
		{"4 connections, 1-20ms jitter", 4, time.Millisecond, 20 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 20; seed++ {
				c := connSim{gbps: []float64{fast, slow}, conns: tc.conns, slice: 1 << 20, request: 16 << 20, threads: 2,
					jitterMin: tc.jmin, jitterSpan: tc.jmax - tc.jmin, seed: seed}
				both := c.run(warmup, total, 0)
				alone := c.run(warmup, total, 1)
				sh := share(both.bytes, 1)
				speedup := alone.makespan.Seconds() / both.makespan.Seconds()
				t.Logf("seed %d: slow share %.3f, both/alone %.3f (both %v, alone %v), learnt fast %.3f slow %.3f Gb/s",
					seed, sh, speedup, both.makespan, alone.makespan, both.ewmaGbps[0], both.ewmaGbps[1])
				if sh < 0.15 || sh > 0.25 {
					t.Errorf("seed %d: the slow rail carried %.3f of the bytes, want 0.15-0.25 (its bandwidth share is 0.20); learnt fast %.3f slow %.3f Gb/s, true %.1f and %.1f",
						seed, sh, both.ewmaGbps[0], both.ewmaGbps[1], fast, slow)
				}
				if speedup < 1.15 {
					t.Errorf("seed %d: both rails moved %d MiB %.3fx as fast as the fast rail alone, want at least 1.15x (ideal 1.25); slow share %.3f",
						seed, total>>20, speedup, sh)
				}
			}
		})
	}
}

// Package cpuprobe measures what the machine's CPUs cost each other: the
// round trip of a cache line between two of them. Every small request
// crosses from the engine to a plugin process and back through shared
// memory (sdk/ring), so this round trip is a floor under its latency
// (docs/performance.md). On a VM it moves with where the host runs the
// vCPUs; ferry doctor reports it.
package cpuprobe

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"time"
)

// ErrUnsupported: this system cannot pin a thread to a CPU.
var ErrUnsupported = errors.New("cpuprobe: pinning threads to CPUs is not supported here")

// Allowed returns the CPUs this process may run on, in ascending order.
func Allowed() ([]int, error) { return allowed() }

// line is a word alone on its cache line and the next (128 bytes, so that
// an adjacent-line prefetch does not pull in the other word).
type line struct {
	v atomic.Uint64
	_ [120]byte
}

// RoundTrip pins one thread to CPU a and another to CPU b and bounces a
// value between them through two cache lines, rounds times each way and
// back, in batches; it returns the median batch's time per round trip.
// It gives up with an error after limit (a CPU that another process holds
// may keep the partner from running at all), or when a CPU cannot be
// pinned (not online, outside this process's affinity).
func RoundTrip(a, b, rounds int, limit time.Duration) (time.Duration, error) {
	if a == b {
		return 0, fmt.Errorf("cpuprobe: CPUs %d and %d are the same", a, b)
	}
	const batches = 9
	per := max(rounds/batches, 1)
	var ping, pong line
	var stop atomic.Bool
	ready := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the pinned thread exits with the goroutine
		if err := pin(b); err != nil {
			ready <- err
			return
		}
		ready <- nil
		for i := uint64(1); ; i++ {
			for ping.v.Load() != i {
				if stop.Load() {
					return
				}
			}
			pong.v.Store(i)
		}
	}()
	defer func() {
		stop.Store(true)
		<-done
	}()
	if err := <-ready; err != nil {
		return 0, err
	}
	// This goroutine's thread is pinned too, and exits with it: a
	// helper goroutine runs the near side, so that the caller's thread
	// keeps its affinity.
	type result struct {
		d   time.Duration
		err error
	}
	res := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked, as above
		if err := pin(a); err != nil {
			res <- result{err: err}
			return
		}
		deadline := time.Now().Add(limit)
		times := make([]time.Duration, 0, batches)
		i := uint64(0)
		for range batches {
			start := time.Now()
			for range per {
				i++
				ping.v.Store(i)
				for n := 0; pong.v.Load() != i; n++ {
					if n&0xffff == 0xffff && time.Now().After(deadline) {
						res <- result{err: fmt.Errorf("cpuprobe: no answer from CPU %d within %v (is it busy with another process?)", b, limit)}
						return
					}
				}
			}
			times = append(times, time.Since(start)/time.Duration(per))
		}
		slices.Sort(times)
		res <- result{d: times[len(times)/2]}
	}()
	r := <-res
	return r.d, r.err
}

// Pair is two CPUs and the round trip of a cache line between them.
type Pair struct {
	A, B int
	RTT  time.Duration
}

// Survey measures RoundTrip between the first of cpus and each of up to
// maxPairs of the others, in order, rounds round trips each, and returns
// the pairs it measured; it stops at the first error. Fewer than two
// CPUs give no pair.
func Survey(cpus []int, maxPairs, rounds int, limit time.Duration) ([]Pair, error) {
	if len(cpus) < 2 {
		return nil, nil
	}
	var out []Pair
	for _, b := range cpus[1:min(len(cpus), maxPairs+1)] {
		d, err := RoundTrip(cpus[0], b, rounds, limit)
		if err != nil {
			return out, err
		}
		out = append(out, Pair{A: cpus[0], B: b, RTT: d})
	}
	return out, nil
}

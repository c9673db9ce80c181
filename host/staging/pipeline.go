package staging

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Slice is one slice of a staged request as it passes the hops.
type Slice struct {
	K   int    // its number, from 0
	Off uint64 // where it starts in the request
	Len uint64

	// Local is its slot in the sender's pool, when the plan takes one
	// (Plan.Pool); a hop copies into or out of Local.Mem[:Len].
	Local    Slot
	HasLocal bool
	// Remote is what a hop learned of the far end for the later hops:
	// the address of the receiver's slot it reserved or filled.
	Remote uint64

	undo []func()
}

// Defer asks for f to run once the slice has left the pipeline, whether
// it passed every hop or not: a hop that took something at the far end
// (a receiver's slot) gives it back this way. They run last first.
func (s *Slice) Defer(f func()) { s.undo = append(s.undo, f) }

// Hop is one step every slice passes, in order.
type Hop struct {
	// Name says what the hop does and where, for errors and
	// explanations: "device to host (cuda:0, plugin simdev)".
	Name string
	// Do moves slice s. It runs on the hop's own goroutine, one slice at
	// a time, while other hops work on other slices. When it returns an
	// error the whole request stops; Do must not return while anything it
	// started still touches s's memory.
	Do func(ctx context.Context, s *Slice) error
	// Workers is how many slices the hop works on at once (its own
	// goroutines); 0 is 1. A hop whose every slice waits on a round trip
	// (a device copy behind an RPC, a network request) keeps its device
	// or link busy through that wait with 2.
	Workers int
}

// Plan is how a request is cut and how many of its slices may be in the
// pipeline at once.
type Plan struct {
	Length    uint64
	SliceSize uint64
	// Pool, when set, gives every slice a slot (Slice.Local) before its
	// first hop, waiting for one within ctx; it also bounds the slices in
	// flight. Nil: the request's own memory is the source or target at
	// this end.
	Pool *Pool
	// Depth bounds the slices in flight (both with and without a pool);
	// 0 is 2, the least that overlaps two hops.
	Depth int
}

// HopError is a failure of one hop of a staged request.
type HopError struct {
	Hop   string
	Slice int
	Err   error
}

func (e *HopError) Error() string {
	return fmt.Sprintf("staging hop %q, slice %d: %v", e.Hop, e.Slice, e.Err)
}

func (e *HopError) Unwrap() error { return e.Err }

// HopTimes is how long each hop was busy, summed over the slices (a hop
// with several workers can be busy longer than the request took), in the
// hops' order: what a caller compares against the whole to see the
// pipeline's overlap.
type HopTimes []time.Duration

// Run moves p.Length bytes through hops, slice by slice, pipelined: each
// hop has a goroutine and works on one slice while the hops before and
// after it work on others. It returns the first failure as a *HopError
// (or ctx's error, or the pool's, before a slice started), and how long
// each hop was busy. Every goroutine it started has exited, every slot
// is back in the pool and every slice's Defer has run before it returns.
func Run(ctx context.Context, p Plan, hops []Hop) (HopTimes, error) {
	if len(hops) == 0 || p.Length == 0 || p.SliceSize == 0 {
		return nil, errors.New("staging: a plan needs a length, a slice size and at least one hop")
	}
	depth := p.Depth
	if depth <= 0 {
		depth = 2
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		once  sync.Once
		first error
	)
	fail := func(err error) {
		once.Do(func() { first = err; cancel(err) })
	}
	times := make(HopTimes, len(hops))
	// inflight bounds the slices between the feeder and the last hop.
	inflight := make(chan struct{}, depth)
	chans := make([]chan *Slice, len(hops)+1)
	for i := range chans {
		chans[i] = make(chan *Slice, depth)
	}
	var wg sync.WaitGroup
	wg.Add(len(hops) + 1)
	go func() { // the feeder: cuts slices and takes their slots
		defer wg.Done()
		defer close(chans[0])
		k := 0
		for off := uint64(0); off < p.Length; off += p.SliceSize {
			select {
			case inflight <- struct{}{}:
			case <-ctx.Done():
				return
			}
			s := &Slice{K: k, Off: off, Len: min(p.SliceSize, p.Length-off)}
			if p.Pool != nil {
				slot, err := p.Pool.Get(ctx)
				if err != nil {
					<-inflight
					fail(err)
					return
				}
				s.Local, s.HasLocal = slot, true
			}
			chans[0] <- s
			k++
		}
	}()
	for h := range hops {
		go func() { // hop h: its workers take slices from chans[h] and pass them on
			defer wg.Done()
			defer close(chans[h+1])
			var (
				workers sync.WaitGroup
				busy    sync.Mutex
			)
			for range max(hops[h].Workers, 1) {
				workers.Go(func() {
					for s := range chans[h] {
						if ctx.Err() == nil {
							start := time.Now()
							err := hops[h].Do(ctx, s)
							d := time.Since(start)
							busy.Lock()
							times[h] += d
							busy.Unlock()
							if err != nil {
								fail(&HopError{Hop: hops[h].Name, Slice: s.K, Err: err})
							}
						}
						chans[h+1] <- s // a slice that failed or was skipped still leaves, through the end
					}
				})
			}
			workers.Wait()
		}()
	}
	passed := 0
	for s := range chans[len(hops)] { // the end: gives back what each slice holds
		if ctx.Err() == nil {
			passed++
		}
		for i := len(s.undo) - 1; i >= 0; i-- {
			s.undo[i]()
		}
		if s.HasLocal {
			p.Pool.Put(s.Local)
		}
		<-inflight
	}
	wg.Wait()
	if first != nil {
		return times, first
	}
	if uint64(passed) == (p.Length+p.SliceSize-1)/p.SliceSize {
		return times, nil // every slice passed every hop: a cancel after that came too late to matter
	}
	return times, context.Cause(ctx)
}

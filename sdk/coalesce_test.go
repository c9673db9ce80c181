package sdk

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ferrydev/ferry/sdk/ring"
)

// tailTransport completes each descriptor inline, on the lane's
// goroutine, and notes the completion ring's published tail (as the
// host sees it) right after each completion.
type tailTransport struct {
	Transport
	alone bool
	mu    sync.Mutex
	cq    *ring.Ring // the host's view; set before the first descriptor
	tails []uint64
	noted chan struct{} // a send after each note
}

func (x *tailTransport) SpinsAlone() bool { return x.alone }

func (x *tailTransport) Submit(d *ring.Descriptor, c Completer) {
	c.Complete(d.Token, ring.StatusOK, d.Length)
	x.mu.Lock() // guards cq too: the test sets it after the lane started
	x.tails = append(x.tails, x.cq.Tail())
	x.mu.Unlock()
	x.noted <- struct{}{}
}

// waitNoted waits for n notes.
func (x *tailTransport) waitNoted(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for range n {
		select {
		case <-x.noted:
		case <-timeout:
			t.Fatal("the transport noted no completion within 10s")
		}
	}
}

// submitRun publishes ds on the submission ring with one store of its
// tail: the lane takes them as one run.
func (r *laneRig) submitRun(t *testing.T, ds []ring.Descriptor) {
	t.Helper()
	for i := range ds {
		if !r.sq.Enqueue(&ds[i]) {
			t.Fatal("submission ring full")
		}
	}
	r.sq.Publish()
}

func writes(n int, length uint64, prio Priority) []ring.Descriptor {
	ds := make([]ring.Descriptor, n)
	for i := range ds {
		ds[i] = ring.Descriptor{Token: uint64(i + 1), Op: ring.OpWrite, Length: length, Prio: uint8(prio)}
	}
	return ds
}

// TestRunCompletionsPublishedTogether: a run of small descriptors on a
// transport that serves them without blocking (SpinsAlone) has its
// completions published holdRun at a time and the rest when the run
// ends; a high-priority run, a run of more than SmallBatch bytes and a
// transport that may block publish each completion at once. Every
// completion reaches the host either way.
func TestRunCompletionsPublishedTogether(t *testing.T) {
	cases := []struct {
		name  string
		alone bool
		ds    []ring.Descriptor
		want  []uint64 // the published tail after each completion
	}{
		{"small run", true, writes(12, 4096, PriorityNormal), []uint64{0, 0, 0, 0, 0, 0, 0, 8, 8, 8, 8, 8}},
		{"one descriptor", true, writes(1, 4096, PriorityNormal), []uint64{1}},
		{"high priority", true, writes(3, 4096, PriorityHigh), []uint64{1, 2, 3}},
		{"large run", true, writes(3, SmallBatch/2, PriorityNormal), []uint64{1, 2, 3}},
		{"transport may block", false, writes(3, 4096, PriorityNormal), []uint64{1, 2, 3}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			x := &tailTransport{alone: c.alone, noted: make(chan struct{}, len(c.ds))}
			r := newLaneRig(t, x, 0)
			x.mu.Lock()
			x.cq = r.cq
			x.mu.Unlock()
			r.submitRun(t, c.ds)
			for range c.ds {
				r.next(t)
			}
			x.waitNoted(t, len(c.ds))
			x.mu.Lock()
			defer x.mu.Unlock()
			if len(x.tails) != len(c.want) {
				t.Fatalf("%d completions noted, want %d", len(x.tails), len(c.want))
			}
			for i, tail := range x.tails {
				if tail != c.want[i] {
					t.Fatalf("published tail after completion %d: %d; want %v (all: %v)", i+1, tail, c.want[i], x.tails)
				}
			}
		})
	}
}

// TestHeldCompletionsPublishedWhenRingFull: completions a run holds fill
// a completion ring shallower than holdRun; the next completion finds it
// full, and what is held is published before the lane waits for room
// (WaitSpace publishes first), so the host, which reaps only what it
// sees, makes room and every completion arrives: the completions of a
// Submit each and those posted in a run (SubmitRun) alike.
func TestHeldCompletionsPublishedWhenRingFull(t *testing.T) {
	t.Run("submit", func(t *testing.T) {
		x := &tailTransport{alone: true, noted: make(chan struct{}, 7)}
		completesOnShallowRing(t, x, x, 7)
	})
	t.Run("run", func(t *testing.T) {
		x := &runTransport{tailTransport: tailTransport{alone: true, noted: make(chan struct{}, 11)}}
		completesOnShallowRing(t, x, &x.tailTransport, 11)
	})
}

// completesOnShallowRing submits a run of n writes to impl (whose
// tailTransport is x) on a lane with a completion ring 4 deep, and
// checks that each completes once, OK.
func completesOnShallowRing(t *testing.T, impl Transport, x *tailTransport, n int) {
	t.Helper()
	r := newLaneRigDepth(t, impl, 0, time.Microsecond, 4, func(*lane) {})
	x.mu.Lock()
	x.cq = r.cq
	x.mu.Unlock()
	ds := writes(n, 4096, PriorityNormal)
	r.submitRun(t, ds)
	seen := map[uint64]bool{}
	for range ds {
		c := r.next(t)
		if c.Status != ring.StatusOK || seen[c.Token] {
			t.Fatalf("completion %+v (seen before: %v)", c, seen[c.Token])
		}
		seen[c.Token] = true
	}
}

// runTransport takes runs (RunSubmitter): it notes each run's tokens,
// completes each descriptor through CompleteInRun (or, for the tokens in
// later, through Complete from another goroutine once the run returned)
// and notes the completion ring's published tail after each.
type runTransport struct {
	tailTransport
	later map[uint64]bool
	runs  [][]uint64
}

func (x *runTransport) Submit(*ring.Descriptor, Completer) {
	panic("a transport that takes runs was handed a descriptor alone")
}

func (x *runTransport) SubmitRun(ds []ring.Descriptor, c RunCompleter) {
	var toks []uint64
	for i := range ds {
		toks = append(toks, ds[i].Token)
	}
	x.mu.Lock() // before any completion: the test looks once it has them all
	x.runs = append(x.runs, toks)
	x.mu.Unlock()
	for i := range ds {
		d := ds[i]
		if x.later[d.Token] {
			go c.Complete(d.Token, ring.StatusOK, d.Length)
			continue
		}
		c.CompleteInRun(d.Token, ring.StatusOK, d.Length)
		x.mu.Lock()
		x.tails = append(x.tails, x.cq.Tail())
		x.mu.Unlock()
		x.noted <- struct{}{}
	}
}

// TestRunSubmitterTakesTheRun: a transport that takes runs gets the
// run's descriptors in one call, without the ones the lane answers
// itself (a NOP, an invalid descriptor); what it completes in the run is
// published as a Submit's completions are (holdRun at a time while the
// run holds them, at once otherwise), and every descriptor completes
// exactly once, those completed from another goroutine after the run
// included.
func TestRunSubmitterTakesTheRun(t *testing.T) {
	mixed := writes(6, 4096, PriorityNormal)
	mixed[1].Op = ring.OpNop
	mixed[4].Length = 0 // invalid
	cases := []struct {
		name  string
		ds    []ring.Descriptor
		later map[uint64]bool
		run   []uint64 // the tokens SubmitRun got
		tails []uint64 // the published tail after each CompleteInRun
		want  map[uint64]ring.Status
	}{
		{name: "small run", ds: writes(12, 4096, PriorityNormal),
			run:   []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
			tails: []uint64{0, 0, 0, 0, 0, 0, 0, 8, 8, 8, 8, 8}},
		{name: "high priority", ds: writes(3, 4096, PriorityHigh),
			run: []uint64{1, 2, 3}, tails: []uint64{1, 2, 3}},
		{name: "large run", ds: writes(3, SmallBatch/2, PriorityNormal),
			run: []uint64{1, 2, 3}, tails: []uint64{1, 2, 3}},
		// The lane answers the NOP (2) and the invalid descriptor (5)
		// itself, before the run; the run holds those completions too.
		{name: "nop and invalid", ds: mixed,
			run: []uint64{1, 3, 4, 6}, tails: []uint64{0, 0, 0, 0},
			want: map[uint64]ring.Status{2: ring.StatusOK, 5: ring.StatusInvalid}},
		{name: "completed after the run", ds: writes(4, 4096, PriorityNormal), later: map[uint64]bool{2: true, 3: true},
			run: []uint64{1, 2, 3, 4}, tails: []uint64{0, 0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			x := &runTransport{tailTransport: tailTransport{alone: true, noted: make(chan struct{}, len(c.ds))}, later: c.later}
			r := newLaneRig(t, x, 0)
			x.mu.Lock()
			x.cq = r.cq
			x.mu.Unlock()
			r.submitRun(t, c.ds)
			got := map[uint64]ring.Status{}
			for range c.ds {
				d := r.next(t)
				if _, dup := got[d.Token]; dup {
					t.Fatalf("token %d completed twice", d.Token)
				}
				got[d.Token] = d.Status
			}
			x.waitNoted(t, len(c.tails))
			for _, d := range c.ds {
				want, ok := c.want[d.Token]
				if !ok {
					want = ring.StatusOK
				}
				if got[d.Token] != want {
					t.Errorf("token %d completed %v, want %v", d.Token, got[d.Token], want)
				}
			}
			x.mu.Lock()
			defer x.mu.Unlock()
			if len(x.runs) != 1 || !slices.Equal(x.runs[0], c.run) {
				t.Fatalf("runs taken: %v, want one: %v", x.runs, c.run)
			}
			if !slices.Equal(x.tails, c.tails) {
				t.Fatalf("published tail after each completion in the run: %v, want %v", x.tails, c.tails)
			}
		})
	}
}

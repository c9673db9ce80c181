package staging

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func newTestPool(t *testing.T, slots, size int) *Pool {
	t.Helper()
	p, err := NewPool(make([]byte, slots*size), uint64(size))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRunMovesEveryByteInOrderOfHops stages a request through two hops
// (into the slot, out of it) and checks the target got every byte.
func TestRunMovesEveryByteThroughTheSlots(t *testing.T) {
	src := make([]byte, 1000)
	for i := range src {
		src[i] = byte(i * 7)
	}
	dst := make([]byte, len(src))
	pool := newTestPool(t, 3, 64)
	hops := []Hop{
		{Name: "in", Do: func(_ context.Context, s *Slice) error { copy(s.Local.Mem[:s.Len], src[s.Off:]); return nil }},
		{Name: "out", Do: func(_ context.Context, s *Slice) error { copy(dst[s.Off:s.Off+s.Len], s.Local.Mem); return nil }},
	}
	if _, err := Run(context.Background(), Plan{Length: uint64(len(src)), SliceSize: 64, Pool: pool, Depth: 3}, hops); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(src, dst) {
		t.Fatal("target differs from source")
	}
	if st := pool.Stats(); st.Used != 0 {
		t.Fatalf("%d slots still out after Run", st.Used)
	}
}

// TestRunOverlapsHops: the second hop of slice 0 does not finish until
// the first hop of slice 1 has started, which only a pipeline allows.
func TestRunOverlapsHops(t *testing.T) {
	started1 := make(chan struct{})
	hops := []Hop{
		{Name: "a", Do: func(_ context.Context, s *Slice) error {
			if s.K == 1 {
				close(started1)
			}
			return nil
		}},
		{Name: "b", Do: func(ctx context.Context, s *Slice) error {
			if s.K == 0 {
				select {
				case <-started1:
				case <-time.After(10 * time.Second):
					return errors.New("slice 1's first hop never started while slice 0 was in the second: no pipelining")
				}
			}
			return nil
		}},
	}
	if _, err := Run(context.Background(), Plan{Length: 3 * 8, SliceSize: 8}, hops); err != nil {
		t.Fatal(err)
	}
}

// TestRunNamesTheFailedHopAndGivesEverythingBack: a failure in the
// middle hop stops the request, names the hop and slice, runs every
// slice's Defer and returns every slot.
func TestRunNamesTheFailedHopAndGivesEverythingBack(t *testing.T) {
	pool := newTestPool(t, 2, 16)
	var deferred, reserved atomic.Int32
	boom := errors.New("device fell off the bus")
	hops := []Hop{
		{Name: "reserve", Do: func(_ context.Context, s *Slice) error {
			reserved.Add(1)
			s.Defer(func() { deferred.Add(1) })
			return nil
		}},
		{Name: "device to host (cuda:0)", Do: func(_ context.Context, s *Slice) error {
			if s.K == 2 {
				return boom
			}
			return nil
		}},
		{Name: "network", Do: func(context.Context, *Slice) error { return nil }},
	}
	_, err := Run(context.Background(), Plan{Length: 16 * 10, SliceSize: 16, Pool: pool}, hops)
	var he *HopError
	if !errors.As(err, &he) || he.Hop != "device to host (cuda:0)" || he.Slice != 2 || !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the device hop's failure on slice 2", err)
	}
	if deferred.Load() != reserved.Load() {
		t.Fatalf("%d slices reserved, %d given back", reserved.Load(), deferred.Load())
	}
	if st := pool.Stats(); st.Used != 0 {
		t.Fatalf("%d slots still out", st.Used)
	}
}

// TestRunEndsWhenThePoolStaysEmpty: with every slot held elsewhere, Run
// waits within its context and returns ErrPoolExhausted.
func TestRunEndsWhenThePoolStaysEmpty(t *testing.T) {
	pool := newTestPool(t, 1, 16)
	held, _ := pool.TryGet()
	defer pool.Put(held)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := Run(ctx, Plan{Length: 32, SliceSize: 16, Pool: pool}, []Hop{{Name: "x", Do: func(context.Context, *Slice) error { return nil }}})
	if !errors.Is(err, ErrPoolExhausted) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want pool exhausted at the deadline", err)
	}
	if st := pool.Stats(); st.Waits == 0 || st.Used != 1 {
		t.Fatalf("stats %+v: want a counted wait and only the held slot out", st)
	}
}

// TestRunStopsOnCancel: a request canceled mid-way stops taking slices,
// lets the hop in progress finish, and returns the cause.
func TestRunStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	why := errors.New("task canceled")
	var done atomic.Int32
	hops := []Hop{{Name: "x", Do: func(_ context.Context, s *Slice) error {
		if s.K == 3 {
			cancel(why)
		}
		done.Add(1)
		return nil
	}}}
	_, err := Run(ctx, Plan{Length: 100 * 4, SliceSize: 4}, hops)
	if !errors.Is(err, why) {
		t.Fatalf("err = %v, want the cancel's cause", err)
	}
	if n := done.Load(); n >= 100 {
		t.Fatalf("%d slices moved after the cancel", n)
	}
}

func TestPoolPutTwiceIsRefused(t *testing.T) {
	pool := newTestPool(t, 2, 8)
	s, _ := pool.TryGet()
	if !pool.Put(s) || pool.Put(s) {
		t.Fatal("second Put of one slot was taken")
	}
	a, _ := pool.TryGet()
	b, ok := pool.TryGet()
	if !ok || a.Index == b.Index {
		t.Fatalf("slots %d and %d handed out together", a.Index, b.Index)
	}
}

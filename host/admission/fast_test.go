package admission

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrydev/ferry/sdk"
)

func admit(t *testing.T, q *Queue[int], r Request, now int64, want bool) Grant {
	t.Helper()
	g, ok := q.Admit(&r, now, nil)
	if ok != want {
		t.Fatalf("Admit(%+v) = %v, want %v", r, ok, want)
	}
	if ok && (!g.Valid() || g.Length != r.Length) {
		t.Fatalf("Admit(%+v) granted %+v", r, g)
	}
	return g
}

// TestAdmitWhenNothingBinds: with no cap, no bound near full and nothing
// held back, Admit lets a request go in its class (promoted near its
// deadline) and counts it for its tenant; an unconfigured tenant is left
// to Offer, which says why.
func TestAdmitWhenNothingBinds(t *testing.T) {
	q := newQueue(t, Config{Promotion: 5 * time.Millisecond, Tenants: []Tenant{{Name: "a", Weight: 2}}})
	if g := admit(t, q, Request{Length: 4096, Priority: sdk.PriorityHigh}, 1, true); g.Class() != ClassHigh {
		t.Errorf("HIGH admitted as %v", g.Class())
	}
	if g := admit(t, q, Request{Length: 100, Priority: sdk.PriorityLow, Tenant: "a", Deadline: 3 * ms}, 1, true); g.Class() != ClassMedium {
		t.Errorf("LOW within its promotion window admitted as %v, want medium", g.Class())
	}
	admit(t, q, Request{Length: 1, Tenant: "nobody"}, 1, false)
	if _, _, err := q.Offer(0, Request{Length: 1, Tenant: "nobody"}, 1); !errors.Is(err, ErrTenant) {
		t.Errorf("Offer of an unconfigured tenant: %v", err)
	}
	st := q.Tenants(nil)
	if st[0].Name != "a" || st[0].Admitted != 1 || st[0].Bytes != 100 || st[1].Admitted != 1 || st[1].Bytes != 4096 {
		t.Errorf("tenants after Admit: %+v", st)
	}
	if q.Counted() || q.Measured() {
		t.Errorf("a queue that bounds nothing: Counted %v, Measured %v; want false, false", q.Counted(), q.Measured())
	}
}

// TestAdmitStopsAtBinding: Admit leaves to Offer a request whose
// in-flight bound is full, or that a held-back request of its class or
// above is ahead of; a request of a class above what is held still goes.
// Release gives the bound back, and the held request goes by Next.
func TestAdmitStopsAtBinding(t *testing.T) {
	q := newQueue(t, Config{Classes: [Classes]Limits{ClassMedium: {InflightRequests: 1}}})
	med := Request{Length: 4096}
	g := admit(t, q, med, 1, true)
	admit(t, q, med, 1, false) // its bound is full
	offer(t, q, 1, med, 1, Later)
	if !q.Held() {
		t.Fatal("Held false with a request held back")
	}
	admit(t, q, Request{Length: 4096, Priority: sdk.PriorityHigh}, 1, true) // above what is held
	admit(t, q, Request{Length: 4096, Priority: sdk.PriorityLow}, 1, false) // behind it
	q.Release(g)
	admit(t, q, med, 1, false) // the held one is ahead, though the bound is free
	v, g, ok := q.Next(2)
	if !ok || v != 1 {
		t.Fatalf("Next after Release = %d, %v; want the held request", v, ok)
	}
	if q.Held() {
		t.Error("Held true with nothing held back")
	}
	admit(t, q, med, 2, false) // the bound is full again
	q.Release(g)
	admit(t, q, med, 2, true)
}

// TestAdmitOffWithCapsAndRejectLate: a rate cap on the total, a class or
// a tenant keeps its requests on Offer's path (the bucket is the
// lock's); early rejection keeps every request there.
func TestAdmitOffWithCapsAndRejectLate(t *testing.T) {
	q := newQueue(t, Config{Tenants: []Tenant{{Name: "capped", Limits: Limits{Rate: 1e6}}}, Classes: [Classes]Limits{ClassLow: {Rate: 1e9}}})
	admit(t, q, Request{Length: 1, Tenant: "capped"}, 1, false)
	admit(t, q, Request{Length: 1, Priority: sdk.PriorityLow}, 1, false)
	admit(t, q, Request{Length: 1}, 1, true)
	q = newQueue(t, Config{Total: Limits{Rate: 1e9}})
	admit(t, q, Request{Length: 1, Priority: sdk.PriorityHigh}, 1, false)
	q = newQueue(t, Config{RejectLate: true})
	admit(t, q, Request{Length: 1}, 1, false)
	if !q.Measured() || !q.Counted() {
		t.Errorf("reject_late: Measured %v, Counted %v; want true, true", q.Measured(), q.Counted())
	}
}

// TestAdmitCountsForFairShares: the bytes Admit lets go count for the
// tenant's fair share as the same requests Offered would: after tenant a
// moved 10 requests, a and b saturating one place get the same order
// whichever path a's first requests took.
func TestAdmitCountsForFairShares(t *testing.T) {
	order := func(fast, tally bool) []int {
		q := newQueue(t, Config{
			Classes: [Classes]Limits{ClassLow: {InflightRequests: 1}},
			Tenants: []Tenant{{Name: "a", Weight: 3}, {Name: "b", Weight: 1}},
		})
		var tl Tally
		for range 10 {
			r := Request{Length: 1 << 20, Tenant: "a"} // medium: not bounded
			switch {
			case tally:
				if _, ok := q.Admit(&r, 1, &tl); !ok {
					t.Fatal("Admit with a tally refused an unbound request")
				}
			case fast:
				admit(t, q, r, 1, true)
			default:
				offer(t, q, 0, r, 1, Now)
			}
		}
		if tally {
			if st := q.Tenants(nil); st[0].Admitted != 0 {
				t.Fatalf("Admit with a tally counted at once: %+v", st[0])
			}
			q.Count(&tl)
			if st := q.Tenants(nil); st[0].Admitted != 10 || st[0].Bytes != 10<<20 {
				t.Fatalf("after Count: %+v, want 10 requests of 1 MiB", st[0])
			}
		}
		g := offer(t, q, 0, Request{Length: 1, Priority: sdk.PriorityLow, Tenant: "b"}, 1, Now)
		for v := 1; v <= 20; v++ {
			tn := "a"
			if v > 10 {
				tn = "b"
			}
			offer(t, q, v, Request{Length: 1 << 20, Priority: sdk.PriorityLow, Tenant: tn}, 1, Later)
		}
		var got []int
		for {
			q.Done(g, true, 2)
			v, gg, ok := q.Next(2)
			if !ok {
				return got
			}
			got, g = append(got, v), gg
		}
	}
	slow, fast, tallied := order(false, false), order(true, false), order(true, true)
	if !equal(slow, fast) || !equal(slow, tallied) {
		t.Errorf("saturated order after Offered requests %v, after Admitted ones %v, tallied %v; want the same", slow, fast, tallied)
	}
	if slow[0] <= 10 {
		t.Errorf("order %v: b, which moved nothing, should go first", slow)
	}
}

// TestAdmitNeverOverrunsABound: many goroutines admitting as much as
// they can and releasing it, beside one that goes through Offer, Next
// and Done under the lock, never have more in flight than the bounds
// allow, and everything is given back at the end. Run it with -race.
func TestAdmitNeverOverrunsABound(t *testing.T) {
	const reqs, bytesCap, size = 4, 3 * 4096, 4096
	q := newQueue(t, Config{Total: Limits{InflightRequests: reqs}, Classes: [Classes]Limits{ClassMedium: {InflightBytes: bytesCap}}})
	var mu sync.Mutex
	var inflight, most, fastN atomic.Int64
	take := func() {
		n := inflight.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
	}
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			var held [reqs + 1]Grant
			for range 2000 {
				n := 0
				for r := (Request{Length: size}); n < len(held); n++ {
					g, ok := q.Admit(&r, 1, nil)
					if !ok {
						break
					}
					take()
					held[n] = g
				}
				fastN.Add(int64(n))
				for _, g := range held[:n] {
					inflight.Add(-1)
					q.Release(g)
				}
				runtime.Gosched()
			}
		})
	}
	wg.Go(func() {
		for v := range 300 {
			mu.Lock()
			g, verdict, err := q.Offer(v, Request{Length: size}, 1)
			mu.Unlock()
			if err != nil {
				t.Error(err)
				return
			}
			for verdict != Now {
				mu.Lock()
				_, g, _ = q.Next(1)
				mu.Unlock()
				if g.Valid() {
					break
				}
				runtime.Gosched() // the fast goroutines hold the places
			}
			take()
			inflight.Add(-1)
			mu.Lock()
			q.Done(g, true, 1)
			mu.Unlock()
		}
	})
	wg.Wait()
	if m := most.Load(); m > bytesCap/size {
		t.Errorf("%d requests of %d bytes in flight at once; the bounds allow %d", m, size, bytesCap/size)
	}
	if fastN.Load() == 0 {
		t.Error("Admit let nothing go")
	}
	if q.total.requests.Load() != 0 || q.classes[ClassMedium].bytes.Load() != 0 || q.Held() {
		t.Errorf("after everything ended: %d requests, %d bytes counted, held %v; want 0, 0, false",
			q.total.requests.Load(), q.classes[ClassMedium].bytes.Load(), q.Held())
	}
}

// TestAdmitAllocatesNothing: Admit and Release allocate nothing.
func TestAdmitAllocatesNothing(t *testing.T) {
	q := newQueue(t, Config{Total: Limits{InflightBytes: 1 << 30}, Tenants: []Tenant{{Name: "a"}}})
	r := Request{Length: 4096, Tenant: "a"}
	if n := testing.AllocsPerRun(200, func() {
		g, _ := q.Admit(&r, 1, nil)
		q.Release(g)
	}); n != 0 {
		t.Errorf("Admit+Release allocate %v times", n)
	}
}

// TestPromotedHeldIsNotPassed: a LOW request held back within its
// promotion window counts as MEDIUM, so a MEDIUM request offered after
// it is held behind it (EDF serves it first) rather than let go, and
// Admit leaves both to Offer; a LOW held far from its deadline is passed.
func TestPromotedHeldIsNotPassed(t *testing.T) {
	q := newQueue(t, Config{Promotion: 5 * time.Millisecond, Classes: [Classes]Limits{ClassLow: {InflightRequests: 1}}, Total: Limits{InflightRequests: 2}})
	low := Request{Length: 1, Priority: sdk.PriorityLow, Deadline: 100 * ms}
	g := offer(t, q, 0, low, 1, Now)
	offer(t, q, 1, low, 1, Later)                    // held by its class, 99 ms from its deadline
	admit(t, q, Request{Length: 1}, 1, false)        // a LOW is held: Offer decides
	gm := offer(t, q, 2, Request{Length: 1}, 1, Now) // far from promotion: passed
	q.Done(gm, true, 2)
	now := 96 * ms // the held LOW is 4 ms from its deadline: promoted
	offer(t, q, 3, Request{Length: 1}, now, Later)
	q.Done(g, true, now)
	if got := drain(q, now); !equal(got, []int{1, 3}) {
		t.Errorf("after the promoted LOW, Next let %v go; want [1 3]", got)
	}
}

// TestReleaseSaysWhetherItFreedRoom: Release reports whether it gave
// back to a budget that bounds what is in flight, so that the dispatcher
// is woken only where a held request may now go: not for a grant whose
// class and tenant no such budget counts (a high-priority read beside a
// capped low class, whose every completion used to wake it).
func TestReleaseSaysWhetherItFreedRoom(t *testing.T) {
	q := newQueue(t, Config{Classes: [Classes]Limits{ClassLow: {InflightBytes: 8192}}})
	high := admit(t, q, Request{Length: 4096, Priority: sdk.PriorityHigh}, 1, true)
	low := admit(t, q, Request{Length: 4096, Priority: sdk.PriorityLow}, 2, true)
	if q.Release(high) {
		t.Error("Release of a high grant that no bound counts said it freed room")
	}
	if !q.Release(low) {
		t.Error("Release of a grant of the capped class said it freed no room")
	}
	if q.Release(Grant{}) {
		t.Error("Release of an invalid grant said it freed room")
	}
	free := newQueue(t, Config{})
	if g := admit(t, free, Request{Length: 4096, Priority: sdk.PriorityLow}, 1, true); free.Release(g) {
		t.Error("Release on a queue that bounds nothing said it freed room")
	}
}

package admission

import (
	"sync"
	"testing"
)

// BenchmarkOfferDone is the queue's locked bookkeeping of one request
// that goes at once: Offer and Done, each under the lock the engine
// takes. The engine paid it on the unloaded path until Admit
// (BenchmarkAdmitRelease); it pays it now where reject_late is on.
func BenchmarkOfferDone(b *testing.B) {
	q, err := New[int](Config{MaxQueued: 4096}, nil)
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	r := Request{Length: 4096}
	now := int64(1)
	b.ReportAllocs()
	for b.Loop() {
		mu.Lock()
		g, v, err := q.Offer(1, r, now)
		mu.Unlock()
		if err != nil || v != Now {
			b.Fatalf("Offer: %v, %v", v, err)
		}
		now += 100
		mu.Lock()
		q.Done(g, true, now)
		mu.Unlock()
	}
}

// BenchmarkAdmitRelease is BenchmarkOfferDone's request on the fast
// path: Admit (nothing binds) and Release, without the lock. "bounded"
// has an in-flight bound on the total, which Admit and Release count
// with a compare-and-swap and an add; "parallel" is the bounded queue
// from every P at once.
func BenchmarkAdmitRelease(b *testing.B) {
	newQ := func(b *testing.B, l Limits) *Queue[int] {
		q, err := New[int](Config{Total: l, MaxQueued: 4096}, nil)
		if err != nil {
			b.Fatal(err)
		}
		return q
	}
	run := func(b *testing.B, q *Queue[int]) {
		r := Request{Length: 4096}
		b.ReportAllocs()
		for b.Loop() {
			g, ok := q.Admit(&r, 1, nil)
			if !ok {
				b.Fatal("Admit refused an unbound request")
			}
			q.Release(g)
		}
	}
	b.Run("unbounded", func(b *testing.B) { run(b, newQ(b, Limits{})) })
	b.Run("tally128", func(b *testing.B) { // a Submit call's 128 requests, counted once
		q := newQ(b, Limits{})
		r := Request{Length: 4096}
		var tl Tally
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			g, ok := q.Admit(&r, 1, &tl)
			if !ok {
				b.Fatal("Admit refused an unbound request")
			}
			q.Release(g)
			if n++; n%128 == 0 {
				q.Count(&tl)
			}
		}
	})
	b.Run("bounded", func(b *testing.B) { run(b, newQ(b, Limits{InflightBytes: 1 << 40, InflightRequests: 1 << 30})) })
	b.Run("parallel", func(b *testing.B) {
		q := newQ(b, Limits{InflightBytes: 1 << 40, InflightRequests: 1 << 30})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			r := Request{Length: 4096}
			for pb.Next() {
				g, ok := q.Admit(&r, 1, nil)
				if !ok {
					b.Error("Admit refused an unbound request")
					return
				}
				q.Release(g)
			}
		})
	})
}

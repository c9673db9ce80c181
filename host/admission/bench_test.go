package admission

import (
	"sync"
	"testing"
)

// BenchmarkOfferDone is the queue's bookkeeping of one request on the
// unloaded path, as the engine pays it with a qos block that bounds
// nothing: Offer (it goes at once) and Done, each under the lock the
// engine takes. It is the part of BenchmarkQoSCost's on-off gap that
// admission itself adds; the rest is the request path's.
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

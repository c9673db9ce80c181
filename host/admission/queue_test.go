package admission

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/sdk"
)

const ms = int64(time.Millisecond)

func newQueue(t *testing.T, cfg Config) *Queue[int] {
	t.Helper()
	q, err := New[int](cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// drain takes every request Next lets go at now, in order.
func drain(q *Queue[int], now int64) []int {
	var out []int
	for {
		v, _, ok := q.Next(now)
		if !ok {
			return out
		}
		out = append(out, v)
	}
}

func offer(t *testing.T, q *Queue[int], v int, r Request, now int64, want Verdict) Grant {
	t.Helper()
	g, verdict, err := q.Offer(v, r, now)
	if err != nil || verdict != want {
		t.Fatalf("Offer(%d, %+v) = %v, %v; want %v", v, r, verdict, err, want)
	}
	return g
}

// TestHighPassesHeldLow: LOW requests held back by their class's budget
// do not hold a HIGH one, which goes at once; the held LOW go in order
// of arrival as the budget frees.
func TestHighPassesHeldLow(t *testing.T) {
	q := newQueue(t, Config{Classes: [Classes]Limits{ClassLow: {InflightRequests: 1}}})
	low := Request{Length: 64 << 20, Priority: sdk.PriorityLow}
	g := offer(t, q, 0, low, 1, Now)
	for v := 1; v <= 3; v++ {
		offer(t, q, v, low, 1, Later)
	}
	hg := offer(t, q, 9, Request{Length: 4096, Priority: sdk.PriorityHigh}, 1, Now)
	if hg.Class() != ClassHigh {
		t.Errorf("HIGH dispatched as %v", hg.Class())
	}
	if got := drain(q, 2); len(got) != 0 {
		t.Fatalf("Next with the LOW budget full let %v go", got)
	}
	var order []int
	for range 3 {
		q.Done(g, true, 3)
		var ok bool
		var v int
		v, g, ok = q.Next(3)
		if !ok {
			t.Fatal("Next after Done let nothing go")
		}
		order = append(order, v)
	}
	if want := []int{1, 2, 3}; !equal(order, want) {
		t.Errorf("LOW went %v, want %v", order, want)
	}
}

// TestEarliestDeadlineFirst: within a class, the earliest deadline goes
// first, requests without one last, ties in order of arrival.
func TestEarliestDeadlineFirst(t *testing.T) {
	q := newQueue(t, Config{Total: Limits{InflightRequests: 1}})
	first := offer(t, q, 0, Request{Length: 1}, 1, Now)
	for v, d := range []int64{0, 50, 20, 0, 20, 10} {
		offer(t, q, v+1, Request{Length: 1, Deadline: d * ms}, 1, Later)
	}
	q.Done(first, true, 2)
	var got []int
	for {
		v, g, ok := q.Next(2)
		if !ok {
			break
		}
		got = append(got, v)
		q.Done(g, true, 2)
	}
	if want := []int{6, 3, 5, 2, 1, 4}; !equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

// TestFairShares: two tenants weighted 3:1, both saturating one request
// in flight, get 3:1 of the bytes dispatched, within 10%.
func TestFairShares(t *testing.T) {
	q := newQueue(t, Config{
		Total:   Limits{InflightRequests: 1},
		Tenants: []Tenant{{Name: "a", Weight: 3}, {Name: "b", Weight: 1}},
	})
	const n = 400
	var g Grant
	var bytes [2]uint64
	for v := range n {
		// a sends 1 MiB requests, b 256 KiB: shares are of bytes, not requests.
		if v == 0 {
			g = offer(t, q, v, Request{Length: 1 << 20, Tenant: "a"}, 1, Now)
		} else {
			offer(t, q, v, Request{Length: 1 << 20, Tenant: "a"}, 1, Later)
		}
		offer(t, q, n+v, Request{Length: 256 << 10, Tenant: "b"}, 1, Later)
	}
	now := int64(1)
	for range n {
		q.Done(g, true, now)
		now += ms
		v, gg, ok := q.Next(now)
		if !ok {
			t.Fatal("saturated queue let nothing go")
		}
		g = gg
		bytes[v/n] += g.Length
	}
	ratio := float64(bytes[0]) / float64(bytes[1])
	if math.Abs(ratio-3)/3 > 0.10 {
		t.Errorf("bytes dispatched a:b = %d:%d = %.3f, want 3 within 10%%", bytes[0], bytes[1], ratio)
	}
	st := q.Tenants(nil)
	if st[0].Name != "a" || st[1].Name != "b" || st[2].Name != DefaultTenant {
		t.Fatalf("tenants %+v", st)
	}
}

// TestRateCap: a tenant capped at 100 MB/s and always backlogged gets
// within 10% of it over a simulated second, however fast completions
// come back; the uncapped tenant beside it is not held by the cap.
func TestRateCap(t *testing.T) {
	const rate = 100e6
	q := newQueue(t, Config{Tenants: []Tenant{{Name: "capped", Limits: Limits{Rate: rate}}}})
	now := int64(1)
	v := 0
	end := now + int64(time.Second)
	for now < end {
		for q.Len() < 8 {
			_, _, err := q.Offer(v, Request{Length: 1 << 20, Tenant: "capped"}, now)
			if err != nil {
				t.Fatal(err)
			}
			v++
		}
		for {
			_, g, ok := q.Next(now)
			if !ok {
				break
			}
			q.Done(g, true, now)
		}
		w := q.Wake(now)
		if w <= now {
			t.Fatalf("capped tenant with work held back: Wake = %d at %d", w, now)
		}
		if _, _, err := q.Offer(-1, Request{Length: 1 << 20}, now); err != nil {
			t.Fatal(err)
		}
		now = w
	}
	got := float64(q.Tenants(nil)[0].Bytes) / 1.0 // over one second
	drain(q, now)                                 // the default tenant's last request, held behind the capped ones' turn
	st := q.Tenants(nil)
	if math.Abs(got-rate)/rate > 0.10 {
		t.Errorf("capped tenant got %.1f MB/s, want %.1f within 10%%", got/1e6, rate/1e6)
	}
	if st[1].Admitted == 0 || st[1].Queued != 0 {
		t.Errorf("default tenant beside the cap: %+v", st[1])
	}
}

// TestPromotionLowersMisses runs one mixed scenario twice, on a
// simulated link that serves one request at a time at 1 GB/s: a MEDIUM
// stream of 1 MB requests (1 ms each) in bursts of 15 every 20 ms, with
// 50 ms deadlines, and a LOW request of 1 MB every 7 ms with a 10 ms
// deadline (89% load in all). Without
// promotion the LOW requests wait until no MEDIUM is held back and most
// miss; with a 6 ms promotion window they move up and EDF serves them in
// time, and the MEDIUM stream still meets its deadlines.
func TestPromotionLowersMisses(t *testing.T) {
	missed := func(promotion time.Duration) (low, medium, lowN int) {
		q := newQueue(t, Config{Total: Limits{InflightRequests: 1}, Promotion: promotion})
		type req struct {
			deadline int64
			low      bool
		}
		var reqs []req
		var busyUntil int64
		var cur Grant
		var curV int
		var have bool
		step := int64(100 * time.Microsecond)
		end := int64(2 * time.Second)
		for now := int64(1); now < end || have || q.Len() > 0; now += step {
			if now < end {
				if now%(20*ms) < step { // a burst of 15 every 20 ms: 750 a second
					for range 15 {
						reqs = append(reqs, req{deadline: now + 50*ms})
						if g, vd, _ := q.Offer(len(reqs)-1, Request{Length: 1e6, Deadline: now + 50*ms}, now); vd == Now {
							cur, curV, have, busyUntil = g, len(reqs)-1, true, now+ms
						}
					}
				}
				if now%(7*ms) < step {
					reqs = append(reqs, req{deadline: now + 10*ms, low: true})
					lowN++
					if g, vd, _ := q.Offer(len(reqs)-1, Request{Length: 1e6, Priority: sdk.PriorityLow, Deadline: now + 10*ms}, now); vd == Now {
						cur, curV, have, busyUntil = g, len(reqs)-1, true, now+ms
					}
				}
			}
			if have && now >= busyUntil {
				if r := reqs[curV]; now > r.deadline {
					if r.low {
						low++
					} else {
						medium++
					}
				}
				q.Done(cur, true, now)
				have = false
			}
			if !have {
				if v, g, ok := q.Next(now); ok {
					cur, curV, have, busyUntil = g, v, true, now+ms
				}
			}
		}
		return low, medium, lowN
	}
	offLow, offMed, n := missed(0)
	onLow, onMed, _ := missed(6 * time.Millisecond)
	t.Logf("LOW deadlines missed of %d: %d without promotion, %d with; MEDIUM missed: %d, %d", n, offLow, onLow, offMed, onMed)
	if onLow >= offLow || offLow < n/4 {
		t.Errorf("promotion did not lower LOW misses: %d without, %d with (of %d)", offLow, onLow, n)
	}
	if onMed > offMed {
		t.Errorf("promotion made MEDIUM miss more: %d without, %d with", offMed, onMed)
	}
}

// TestRefusals: an unconfigured tenant, a full queue and a request that
// cannot meet its deadline are refused, each saying why; nothing of them
// is held.
func TestRefusals(t *testing.T) {
	q := newQueue(t, Config{Total: Limits{InflightRequests: 1}, MaxQueued: 2, RejectLate: true, Tenants: []Tenant{{Name: "a"}}})
	_, _, err := q.Offer(0, Request{Length: 1, Tenant: "nobody"}, 1)
	if !errors.Is(err, ErrTenant) || !strings.Contains(err.Error(), `"nobody"`) || !strings.Contains(err.Error(), `"a", "default"`) {
		t.Errorf("unconfigured tenant: %v", err)
	}
	// Measure a bandwidth: 1 MB done in 10 ms is 100 MB/s.
	g := offer(t, q, 1, Request{Length: 1e6}, 1, Now)
	q.Done(g, true, 1+10*ms)
	if bw := q.Bandwidth(1 + 10*ms); math.Abs(bw-100e6) > 1e6 {
		t.Fatalf("bandwidth %v, want 100 MB/s", bw)
	}
	now := 1 + 10*ms
	g = offer(t, q, 2, Request{Length: 1e6}, now, Now)
	offer(t, q, 3, Request{Length: 1e6}, now, Later)
	// 3 MB ahead and its own 1 MB at 100 MB/s: 40 ms; 20 ms is too short.
	_, _, err = q.Offer(4, Request{Length: 1e6, Deadline: now + 20*ms}, now)
	if !errors.Is(err, ErrLate) || !strings.Contains(err.Error(), "100.0 MB/s") || !strings.Contains(err.Error(), "1000000 bytes held back") {
		t.Errorf("late request: %v", err)
	}
	offer(t, q, 5, Request{Length: 1e6, Deadline: now + 100*ms}, now, Later)
	_, _, err = q.Offer(6, Request{Length: 1}, now)
	if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "max_queued") {
		t.Errorf("full queue: %v", err)
	}
	if q.Len() != 2 {
		t.Errorf("held back %d, want 2", q.Len())
	}
	_, _, err = q.Offer(7, Request{Length: 1, Deadline: now - ms}, now)
	if !errors.Is(err, ErrLate) || !strings.Contains(err.Error(), "passed") {
		t.Errorf("expired request: %v", err)
	}
	q.Done(g, true, now)
	if got := drain(q, now); !equal(got, []int{5}) {
		t.Errorf("after Done, Next let %v go; want [5] (its deadline first)", got)
	}
}

// TestStaleDropped: a held-back request that ended while held is dropped
// by Next and by a full queue's sweep, never dispatched.
func TestStaleDropped(t *testing.T) {
	ended := map[int]bool{}
	q, err := New[int](Config{Total: Limits{InflightRequests: 1}, MaxQueued: 2}, func(v int, _ int64) bool { return ended[v] })
	if err != nil {
		t.Fatal(err)
	}
	g := offer(t, q, 0, Request{Length: 1}, 1, Now)
	offer(t, q, 1, Request{Length: 1}, 1, Later)
	offer(t, q, 2, Request{Length: 1}, 1, Later)
	ended[1], ended[2] = true, true
	offer(t, q, 3, Request{Length: 1}, 1, Later) // the sweep made room
	q.Done(g, true, 2)
	if got := drain(q, 2); !equal(got, []int{3}) || q.Dropped != 2 {
		t.Errorf("Next let %v go, dropped %d; want [3], 2", got, q.Dropped)
	}
	q.Remove(func(int) bool { return true })
	if q.Len() != 0 {
		t.Errorf("Remove left %d", q.Len())
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Tenants: []Tenant{{Name: "a"}, {Name: "a"}}}, `tenant "a" is listed twice`},
		{Config{Tenants: []Tenant{{Name: "a", Weight: -1}}}, `tenant "a": weight -1`},
		{Config{Classes: [Classes]Limits{ClassLow: {Rate: -5}}}, "class low: rate -5"},
	} {
		if _, err := New[int](c.cfg, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, want %q", c.cfg, err, c.want)
		}
	}
}

// TestSteadyPathAllocatesNothing: Offer, Next and Done of a queue that
// has grown to its working size allocate nothing.
func TestSteadyPathAllocatesNothing(t *testing.T) {
	q := newQueue(t, Config{Total: Limits{InflightRequests: 1}, Tenants: []Tenant{{Name: "a", Weight: 2}}})
	now := int64(1)
	run := func() {
		g, _, _ := q.Offer(1, Request{Length: 4096, Tenant: "a", Deadline: now + ms}, now)
		_, _, _ = q.Offer(2, Request{Length: 4096, Priority: sdk.PriorityLow}, now)
		q.Done(g, true, now)
		for {
			_, g, ok := q.Next(now)
			if !ok {
				break
			}
			q.Done(g, true, now)
		}
		now += 1000
	}
	run()
	if n := testing.AllocsPerRun(200, run); n != 0 {
		t.Errorf("Offer+Next+Done allocate %v times", n)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

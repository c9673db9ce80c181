package admission

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// Limits bound a class or a tenant; a zero field is no bound.
type Limits struct {
	// Rate caps the bytes per second dispatched: a token bucket.
	Rate float64
	// Burst is the bucket's depth in bytes; 0 is Rate's 10 ms, at
	// least 64 KiB.
	Burst uint64
	// InflightBytes and InflightRequests bound what is dispatched and
	// not yet done.
	InflightBytes    uint64
	InflightRequests int
}

// Tenant is one tenant's share and budget.
type Tenant struct {
	Name string
	// Weight is its share against the other tenants with work queued;
	// 0 is 1.
	Weight float64
	Limits
}

// Config is a Queue's settings, as the qos block gives them.
type Config struct {
	// Total bounds everything dispatched, whatever its class: with it
	// the classes compete, and the rings stay as shallow as it says.
	Total Limits
	// Classes are the budgets of ClassHigh, ClassMedium and ClassLow.
	Classes [Classes]Limits
	// Tenants are the configured tenants. A request naming none belongs
	// to Default, which is added with weight 1 when not listed.
	Tenants []Tenant
	// Default names the default tenant; "" is "default".
	Default string
	// Promotion: a request whose deadline is at most this far ahead
	// moves up a class (Low to Medium, Medium to High); 0 turns it off.
	Promotion time.Duration
	// RejectLate refuses, at Offer, a request that cannot meet its
	// deadline given the bytes ahead of it and the measured bandwidth.
	RejectLate bool
	// MaxQueued bounds the requests held back; Offer answers ErrBusy
	// beyond it. 0 is no bound.
	MaxQueued int
}

// DefaultTenant is the default tenant's name when Config.Default is "".
const DefaultTenant = "default"

// ErrBusy is the queue being full (Config.MaxQueued): try later.
var ErrBusy = errors.New("admission queue full")

// ErrLate is a request refused because it cannot meet its deadline
// (Config.RejectLate).
var ErrLate = errors.New("cannot meet its deadline")

// ErrTenant is a request naming a tenant that is not configured.
var ErrTenant = errors.New("unconfigured tenant")

// Grant is what a dispatched request holds of the budgets, for Done or
// Release.
type Grant struct {
	Length uint64
	tenant uint16
	class  Class
	ok     bool
}

// Class returns the class the request was dispatched in (promoted, it is
// above its own).
func (g Grant) Class() Class { return g.class }

// Valid reports whether g came from Offer or Next.
func (g Grant) Valid() bool { return g.ok }

// bucket is a token bucket; tokens may go negative (a request larger
// than the depth goes when the bucket is full).
type bucket struct {
	rate, depth, tokens float64
	last                int64
}

func newBucket(l Limits) bucket {
	if l.Rate <= 0 {
		return bucket{}
	}
	d := float64(l.Burst)
	if d == 0 {
		d = max(l.Rate/100, 64<<10)
	}
	return bucket{rate: l.Rate, depth: d, tokens: d}
}

func (b *bucket) refill(now int64) {
	if b.rate == 0 || now <= b.last {
		return
	}
	if b.last != 0 {
		b.tokens = min(b.depth, b.tokens+b.rate*float64(now-b.last)/1e9)
	}
	b.last = now
}

// ready reports whether the bucket lets a request go; when not, at
// (unix ns) is when it will.
func (b *bucket) ready(now int64) (ok bool, at int64) {
	if b.rate == 0 {
		return true, 0
	}
	b.refill(now)
	if b.tokens >= 0 {
		return true, 0
	}
	return false, now + int64(math.Ceil(-b.tokens/b.rate*1e9))
}

// budget is a class's or a tenant's budget and what it holds now. The
// in-flight counts are atomics, kept only for the bounds the budget has,
// so that Admit and Release count without the engine's lock (reserve
// checks and counts in one step, against the others); the bucket is
// only touched under the lock.
type budget struct {
	lim      Limits
	bucket   bucket
	bytes    atomic.Uint64
	requests atomic.Int64
}

func (b *budget) init(l Limits) {
	b.lim = l
	b.bucket = newBucket(l)
}

// counted reports whether b bounds what is in flight.
func (b *budget) counted() bool { return b.lim.InflightBytes > 0 || b.lim.InflightRequests > 0 }

// fits reports whether a request of n bytes fits; a request alone is
// let through whatever its size, so that none waits forever.
func (b *budget) fits(n uint64, now int64) (bool, int64) {
	if l := b.lim.InflightRequests; l > 0 && b.requests.Load() >= int64(l) {
		return false, 0
	}
	if l := b.lim.InflightBytes; l > 0 {
		if v := b.bytes.Load(); v > 0 && v+n > l {
			return false, 0
		}
	}
	return b.bucket.ready(now)
}

// reserve counts a request of n bytes in b's in-flight bounds if it
// fits them (as fits says), and reports whether it did; it is safe
// beside other reserves and gives, so that two that race cannot both
// take the last place.
func (b *budget) reserve(n uint64) bool {
	if l := int64(b.lim.InflightRequests); l > 0 {
		for {
			r := b.requests.Load()
			if r >= l {
				return false
			}
			if b.requests.CompareAndSwap(r, r+1) {
				break
			}
		}
	}
	if l := b.lim.InflightBytes; l > 0 {
		for {
			v := b.bytes.Load()
			if v > 0 && v+n > l {
				if b.lim.InflightRequests > 0 {
					b.requests.Add(-1)
				}
				return false
			}
			if b.bytes.CompareAndSwap(v, v+n) {
				break
			}
		}
	}
	return true
}

// give takes a request of n bytes back out of b's in-flight bounds, and
// reports whether b has such bounds: whether the room it made may let a
// held request go.
func (b *budget) give(n uint64) bool {
	if b.lim.InflightRequests > 0 {
		b.requests.Add(-1)
	}
	if b.lim.InflightBytes > 0 {
		b.bytes.Add(-n)
	}
	return b.counted()
}

// charge takes n bytes from b's rate cap; under the lock.
func (b *budget) charge(n uint64, now int64) {
	if b.bucket.rate != 0 {
		b.bucket.refill(now)
		b.bucket.tokens -= float64(n)
	}
}

// entry is one held-back request.
type entry[T any] struct {
	v        T
	length   uint64
	deadline int64 // unix ns, 0 for none
	seq      uint64
}

// tenant is one tenant's state.
type tenant struct {
	name   string
	weight float64
	budget budget
	// vtime is its virtual time: bytes dispatched over weight. The
	// tenant with the least goes next.
	vtime float64
	// heaps are its requests held back per class, earliest deadline
	// first (none last), then in order of arrival: indexes into entries.
	heaps  [Classes][]int32
	queued int
	// admitted and bytes count what it had dispatched (TenantStats);
	// Admit adds to them without the lock, and last is the length of
	// its latest request. folded is how much of bytes vtime includes:
	// fold adds the rest, Admit's.
	admitted, bytes, last atomic.Uint64
	folded                uint64
	rejected              uint64
	// fast has bit c set when no rate cap bounds a request of this
	// tenant in class c (the total's, the class's, its own): Admit may
	// let it go.
	fast uint8
}

// TenantStats are a tenant's counters.
type TenantStats struct {
	Name string
	// Admitted counts requests dispatched (at once or from the queue);
	// Rejected those refused (busy, late); Bytes the bytes dispatched.
	Admitted, Rejected, Bytes uint64
	// Queued is how many it has held back now.
	Queued int
}

// Queue holds requests back in classes and tenants and says which goes
// next. It is not safe for concurrent use: the engine locks it. T is the
// engine's handle of a request.
type Queue[T any] struct {
	cfg     Config
	tenants []tenant
	byName  map[string]uint16
	dflt    uint16
	total   budget
	classes [Classes]budget
	entries []entry[T]
	free    []int32
	queued  int
	// queuedBytes per class, for early rejection.
	queuedBytes [Classes]uint64
	inflight    uint64
	seq         uint64
	vclock      float64
	bw          estimator
	// stale, when set, says of a held-back request that it ended while
	// held (canceled, expired): Next drops it.
	stale func(T, int64) bool
	// Dropped counts the stale requests dropped.
	Dropped uint64
	// heldIn has bit c set while requests of class c are held back
	// (heldN counts them): Admit lets nothing pass them.
	heldIn atomic.Uint32
	heldN  [Classes]int
	// measured: RejectLate, which needs the bandwidth of completions
	// and what is in flight, so that Done is called under the lock and
	// Admit is off. Otherwise Bandwidth measures the bytes dispatched,
	// from one call to the next (rateAt, rateBytes).
	measured   bool
	rateAt     int64
	rateBytes  uint64
	countedAny bool // some budget bounds what is in flight
}

// New returns a queue with cfg's settings, or an error naming the
// setting that is wrong. stale may be nil.
func New[T any](cfg Config, stale func(v T, now int64) bool) (*Queue[T], error) {
	q := &Queue[T]{cfg: cfg, byName: map[string]uint16{}, stale: stale}
	if cfg.Default == "" {
		q.cfg.Default = DefaultTenant
	}
	if err := checkLimits(cfg.Total); err != nil {
		return nil, fmt.Errorf("total: %w", err)
	}
	q.total.init(cfg.Total)
	for c, l := range cfg.Classes {
		if err := checkLimits(l); err != nil {
			return nil, fmt.Errorf("class %s: %w", Class(c), err)
		}
		q.classes[c].init(l)
	}
	add := func(t Tenant) error {
		if _, dup := q.byName[t.Name]; dup {
			return fmt.Errorf("tenant %q is listed twice", t.Name)
		}
		if t.Weight < 0 || math.IsNaN(t.Weight) || math.IsInf(t.Weight, 0) {
			return fmt.Errorf("tenant %q: weight %v: want a positive number", t.Name, t.Weight)
		}
		if err := checkLimits(t.Limits); err != nil {
			return fmt.Errorf("tenant %q: %w", t.Name, err)
		}
		w := t.Weight
		if w == 0 {
			w = 1
		}
		q.byName[t.Name] = uint16(len(q.tenants))
		q.tenants = append(q.tenants, tenant{name: t.Name, weight: w})
		q.tenants[len(q.tenants)-1].budget.init(t.Limits)
		return nil
	}
	for _, t := range cfg.Tenants {
		if err := add(t); err != nil {
			return nil, err
		}
	}
	if _, ok := q.byName[q.cfg.Default]; !ok {
		if err := add(Tenant{Name: q.cfg.Default, Weight: 1}); err != nil {
			return nil, err
		}
	}
	if len(q.tenants) > math.MaxUint16 {
		return nil, fmt.Errorf("%d tenants: at most %d", len(q.tenants), math.MaxUint16)
	}
	q.dflt = q.byName[q.cfg.Default]
	q.measured = cfg.RejectLate
	q.countedAny = q.total.counted()
	for c := range q.classes {
		q.countedAny = q.countedAny || q.classes[c].counted()
	}
	for i := range q.tenants {
		t := &q.tenants[i]
		q.countedAny = q.countedAny || t.budget.counted()
		for c := range q.classes {
			if q.total.lim.Rate == 0 && q.classes[c].lim.Rate == 0 && t.budget.lim.Rate == 0 {
				t.fast |= 1 << c
			}
		}
	}
	n := max(cfg.MaxQueued, 64)
	q.entries = make([]entry[T], 0, n)
	q.free = make([]int32, 0, n)
	for i := range q.tenants {
		for c := range q.tenants[i].heaps {
			q.tenants[i].heaps[c] = make([]int32, 0, 16)
		}
	}
	return q, nil
}

func checkLimits(l Limits) error {
	if l.Rate < 0 || math.IsNaN(l.Rate) || math.IsInf(l.Rate, 0) {
		return fmt.Errorf("rate %v: want a positive number of bytes per second", l.Rate)
	}
	if l.InflightRequests < 0 {
		return fmt.Errorf("inflight requests %d: want a positive number", l.InflightRequests)
	}
	return nil
}

// tenantOf returns the index of the tenant r names.
func (q *Queue[T]) tenantOf(name string) (uint16, error) {
	if name == "" {
		return q.dflt, nil
	}
	if i, ok := q.byName[name]; ok {
		return i, nil
	}
	return 0, fmt.Errorf("%w %q: the qos block configures %s; add a tenant %q block or fix Request.Tenant", ErrTenant, name, q.tenantList(), name)
}

func (q *Queue[T]) tenantList() string {
	s := ""
	for i := range q.tenants {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%q", q.tenants[i].name)
	}
	return s
}

// class returns the class a request of class c with deadline d is in at
// now: one up when its deadline is within the promotion window.
func (q *Queue[T]) class(c Class, d, now int64) Class {
	if c > ClassHigh && q.cfg.Promotion > 0 && d != 0 && d-now <= int64(q.cfg.Promotion) {
		return c - 1
	}
	return c
}

// Offer admits r (whose handle is v) at now: at once (Now, with its
// grant), or held back (Later: Next returns it when its turn comes). It
// returns an error, and holds nothing, for a tenant not configured
// (ErrTenant), a full queue (ErrBusy) or, with RejectLate, a request
// that cannot meet its deadline (ErrLate, saying why).
func (q *Queue[T]) Offer(v T, r Request, now int64) (Grant, Verdict, error) {
	ti, err := q.tenantOf(r.Tenant)
	if err != nil {
		return Grant{}, Reject, err
	}
	t := &q.tenants[ti]
	c := q.class(ClassOf(r.Priority), r.Deadline, now)
	if q.cfg.RejectLate && r.Deadline != 0 {
		if err := q.late(c, r, now); err != nil {
			t.rejected++
			return Grant{}, Reject, err
		}
	}
	q.fold()
	if q.mayGo(ti, c, now) && q.reserve(ti, c, r.Length) {
		return q.dispatch(ti, c, r.Length, now), Now, nil
	}
	if q.cfg.MaxQueued > 0 && q.queued >= q.cfg.MaxQueued {
		q.sweep(now)
		if q.queued >= q.cfg.MaxQueued {
			t.rejected++
			return Grant{}, Reject, fmt.Errorf("%w: %d requests held back, the most qos.max_queued allows; submit fewer at once or raise it", ErrBusy, q.queued)
		}
	}
	var k int32
	if n := len(q.free); n > 0 {
		k = q.free[n-1]
		q.free = q.free[:n-1]
	} else {
		k = int32(len(q.entries))
		q.entries = append(q.entries, entry[T]{})
	}
	q.seq++
	q.entries[k] = entry[T]{v: v, length: r.Length, deadline: r.Deadline, seq: q.seq}
	oc := ClassOf(r.Priority) // held in its own class; promotion is looked at each Next
	if t.queued == 0 && t.vtime < q.vclock {
		t.vtime = q.vclock // no credit for time spent idle
	}
	t.heaps[oc] = q.push(t.heaps[oc], k)
	t.queued++
	q.queued++
	q.queuedBytes[oc] += r.Length
	if q.heldN[oc]++; q.heldN[oc] == 1 {
		q.heldIn.Store(q.heldIn.Load() | 1<<oc)
	}
	return Grant{}, Later, nil
}

// mayGo reports whether a request of tenant ti in class c may go at once
// but for the in-flight bounds (reserve's): nothing of its class or above
// is held back (a request of the class below within its promotion window
// counts as of c), and no rate cap holds it.
func (q *Queue[T]) mayGo(ti uint16, c Class, now int64) bool {
	if q.heldIn.Load()&upTo(c) != 0 || q.promotedInto(c, now) {
		return false
	}
	ok, _ := q.total.bucket.ready(now)
	if ok {
		ok, _ = q.classes[c].bucket.ready(now)
	}
	if ok {
		ok, _ = q.tenants[ti].budget.bucket.ready(now)
	}
	return ok
}

// upTo is the heldIn bits of class c and the classes above it.
func upTo(c Class) uint32 { return 1<<(c+1) - 1 }

// promotedInto reports whether a request held back in the class below c
// is within its promotion window, and so counts as of c.
func (q *Queue[T]) promotedInto(c Class, now int64) bool {
	if q.cfg.Promotion <= 0 || c >= ClassLow || q.heldIn.Load()&(1<<(c+1)) == 0 {
		return false
	}
	for i := range q.tenants {
		if h := q.tenants[i].heaps[c+1]; len(h) > 0 && q.class(c+1, q.entries[h[0]].deadline, now) == c {
			return true
		}
	}
	return false
}

// reserve counts a request of n bytes of tenant ti in class c in the
// in-flight bounds of the total, the class and the tenant, all or none,
// and reports whether it fit; safe beside Admit and Release.
func (q *Queue[T]) reserve(ti uint16, c Class, n uint64) bool {
	if !q.countedAny {
		return true
	}
	if !q.total.reserve(n) {
		return false
	}
	if !q.classes[c].reserve(n) {
		q.total.give(n)
		return false
	}
	if !q.tenants[ti].budget.reserve(n) {
		q.classes[c].give(n)
		q.total.give(n)
		return false
	}
	return true
}

// dispatch lets a request of n bytes of tenant ti go in class c, its
// in-flight bounds reserved: the rate caps, its tenant's virtual time
// and counters.
func (q *Queue[T]) dispatch(ti uint16, c Class, n uint64, now int64) Grant {
	t := &q.tenants[ti]
	q.total.charge(n, now)
	q.classes[c].charge(n, now)
	t.budget.charge(n, now)
	q.vclock = max(q.vclock, t.vtime)
	t.vtime += float64(n) / t.weight
	t.folded += n
	t.admitted.Add(1)
	t.bytes.Add(n)
	if q.measured {
		if q.inflight == 0 {
			q.bw.start(now)
		}
		q.inflight += n
	}
	return Grant{Length: n, tenant: ti, class: c, ok: true}
}

// fold adds the bytes Admit let go to their tenants' virtual times, so
// that the fair order counts them as it counts the queue's own: the
// virtual time and clock are those dispatch would have left after the
// same requests (the clock is the virtual time before the last).
func (q *Queue[T]) fold() {
	for i := range q.tenants {
		t := &q.tenants[i]
		if b := t.bytes.Load(); b != t.folded {
			t.vtime += float64(b-t.folded) / t.weight
			t.folded = b
			q.vclock = max(q.vclock, t.vtime-float64(t.last.Load())/t.weight)
		}
	}
}

// late returns ErrLate, saying why, when r cannot finish by its deadline
// at the measured bandwidth behind what is held back in its class and
// above and what is in flight.
func (q *Queue[T]) late(c Class, r Request, now int64) error {
	left := r.Deadline - now
	if left <= 0 {
		return fmt.Errorf("%w: its deadline passed %s before it was admitted", ErrLate, time.Duration(-left))
	}
	bw := q.bw.rate
	if bw <= 0 {
		return nil // nothing measured yet: let it try
	}
	var ahead uint64
	for k := range int(c) + 1 {
		ahead += q.queuedBytes[k]
	}
	need := time.Duration(float64(ahead+q.inflight+r.Length) / bw * 1e9)
	if need <= time.Duration(left) {
		return nil
	}
	return fmt.Errorf("%w: %d bytes held back ahead of it in class %s or above and %d in flight, with its %d, take about %s at the measured %.1f MB/s; its deadline is %s away",
		ErrLate, ahead, c, q.inflight, r.Length, need.Round(time.Microsecond), bw/1e6, time.Duration(left).Round(time.Microsecond))
}

// Next returns the held-back request to dispatch now, with its grant, or
// ok false when none may go: nothing is held back, or the budgets are
// full (a Done frees them) or a rate cap holds them (Wake says until
// when). The order: the highest class (a request within the promotion
// window of its deadline counts one class up) whose budget fits; in it,
// the tenant with the least virtual time whose budget fits; its earliest
// deadline.
func (q *Queue[T]) Next(now int64) (v T, g Grant, ok bool) {
	if q.queued > 0 {
		q.fold()
	}
	for q.queued > 0 {
		ti, oc, c, found := q.pick(now)
		if !found {
			return v, Grant{}, false
		}
		t := &q.tenants[ti]
		k := t.heaps[oc][0]
		e := q.entries[k]
		stale := q.stale != nil && q.stale(e.v, now)
		if !stale && !q.reserve(ti, c, e.length) {
			return v, Grant{}, false // Admit took the place pick saw; its Release frees it
		}
		t.heaps[oc] = q.pop(t.heaps[oc])
		q.release(t, oc, k)
		if stale {
			q.Dropped++
			continue
		}
		return e.v, q.dispatch(ti, c, e.length, now), true
	}
	return v, Grant{}, false
}

// release forgets entry k, held back by t in class oc.
func (q *Queue[T]) release(t *tenant, oc Class, k int32) {
	e := &q.entries[k]
	t.queued--
	q.queued--
	q.queuedBytes[oc] -= e.length
	if q.heldN[oc]--; q.heldN[oc] == 0 {
		q.heldIn.Store(q.heldIn.Load() &^ (1 << oc))
	}
	var zero entry[T]
	*e = zero
	q.free = append(q.free, k)
}

// pick chooses the next request: its tenant, its own class (the heap it
// is in) and the class it goes as.
func (q *Queue[T]) pick(now int64) (ti uint16, oc, c Class, ok bool) {
	best := math.Inf(1)
	if fits, _ := q.total.fits(1, now); !fits {
		return
	}
	for cl := ClassHigh; cl < Classes; cl++ {
		if fits, _ := q.classes[cl].fits(1, now); !fits {
			continue
		}
		for i := range q.tenants {
			t := &q.tenants[i]
			if t.queued == 0 || t.vtime >= best {
				continue
			}
			from, have := q.head(t, cl, now)
			if !have {
				continue
			}
			n := q.entries[t.heaps[from][0]].length
			if fits, _ := q.total.fits(n, now); !fits {
				continue
			}
			if fits, _ := q.classes[cl].fits(n, now); !fits {
				continue
			}
			if fits, _ := t.budget.fits(n, now); !fits {
				continue
			}
			best, ti, oc, c, ok = t.vtime, uint16(i), from, cl, true
		}
		if ok {
			return
		}
	}
	return
}

// head returns the heap of t that has a request to go in class cl: its
// own cl heap, or, with promotion, the class below when its earliest
// deadline is within the window (which goes first: it is the more
// urgent).
func (q *Queue[T]) head(t *tenant, cl Class, now int64) (Class, bool) {
	if cl < ClassLow {
		if h := t.heaps[cl+1]; len(h) > 0 && q.class(cl+1, q.entries[h[0]].deadline, now) == cl {
			return cl + 1, true
		}
	}
	return cl, len(t.heaps[cl]) > 0
}

// Wake returns when (unix ns) a rate cap next lets a held-back request
// go, 0 when nothing waits on one (a Done or an Offer is what frees the
// rest).
func (q *Queue[T]) Wake(now int64) int64 {
	if q.queued == 0 {
		return 0
	}
	var at int64
	soon := func(b *budget) {
		if ok, w := b.bucket.ready(now); !ok && (at == 0 || w < at) {
			at = w
		}
	}
	soon(&q.total)
	for c := range q.classes {
		soon(&q.classes[c])
	}
	for i := range q.tenants {
		if q.tenants[i].queued > 0 {
			soon(&q.tenants[i].budget)
		}
	}
	if q.cfg.Promotion > 0 { // a deadline entering the window changes the order
		for i := range q.tenants {
			for c := ClassMedium; c < Classes; c++ {
				if h := q.tenants[i].heaps[c]; len(h) > 0 {
					if d := q.entries[h[0]].deadline; d != 0 {
						if w := d - int64(q.cfg.Promotion); w > now && (at == 0 || w < at) {
							at = w
						}
					}
				}
			}
		}
	}
	return at
}

// Done gives back what g held, the request having ended at now; sent
// false says it never left (its bytes do not count for the bandwidth).
// Under the lock; without RejectLate (Measured false) Release does the
// same without it.
func (q *Queue[T]) Done(g Grant, sent bool, now int64) (freed bool) {
	if !g.ok {
		return false
	}
	freed = q.Release(g)
	if q.measured {
		q.inflight -= g.Length
		if sent {
			q.bw.done(g.Length, now, q.inflight == 0)
		}
	}
	return freed
}

// Remove drops every held-back request whose handle match says so; for
// handles that are about to become invalid (a batch freed).
func (q *Queue[T]) Remove(match func(T) bool) {
	for i := range q.tenants {
		t := &q.tenants[i]
		for c := range t.heaps {
			h := t.heaps[c]
			kept := h[:0]
			for _, k := range h {
				if match(q.entries[k].v) {
					q.releaseKeep(t, Class(c), k)
				} else {
					kept = append(kept, k)
				}
			}
			t.heaps[c] = q.heapify(kept)
		}
	}
}

// releaseKeep is release for an entry already out of its heap.
func (q *Queue[T]) releaseKeep(t *tenant, c Class, k int32) { q.release(t, c, k) }

// Sweep drops every held-back request that ended while held (the stale
// function says which); Next drops them only as they come up.
func (q *Queue[T]) Sweep(now int64) { q.sweep(now) }

func (q *Queue[T]) sweep(now int64) {
	if q.stale == nil {
		return
	}
	n := q.queued
	q.Remove(func(v T) bool { return q.stale(v, now) })
	q.Dropped += uint64(n - q.queued)
}

// Drain empties the queue, calling f with every held-back request.
func (q *Queue[T]) Drain(f func(T)) {
	q.Remove(func(v T) bool { f(v); return true })
}

// Len returns how many requests are held back.
func (q *Queue[T]) Len() int { return q.queued }

// Bandwidth returns the measured bandwidth at now in bytes per second, 0
// before any. With RejectLate it is that of completions while something
// is in flight (what early rejection reckons with); otherwise that of
// the bytes dispatched from one call to the next at least 10 ms later,
// smoothed over calls (Done and Admit then keep no clock).
func (q *Queue[T]) Bandwidth(now int64) float64 {
	if q.measured {
		return q.bw.rate
	}
	var sum uint64
	for i := range q.tenants {
		sum += q.tenants[i].bytes.Load()
	}
	switch d := now - q.rateAt; {
	case q.rateAt == 0:
		q.rateAt, q.rateBytes = now, sum
	case d >= bwWindow:
		r := float64(sum-q.rateBytes) / (float64(d) / 1e9)
		if q.bw.rate == 0 {
			q.bw.rate = r
		} else {
			q.bw.rate = 0.75*q.bw.rate + 0.25*r
		}
		q.rateAt, q.rateBytes = now, sum
	}
	return q.bw.rate
}

// Tenants appends every tenant's counters to out.
func (q *Queue[T]) Tenants(out []TenantStats) []TenantStats {
	for i := range q.tenants {
		t := &q.tenants[i]
		out = append(out, TenantStats{Name: t.name, Admitted: t.admitted.Load(), Rejected: t.rejected, Bytes: t.bytes.Load(), Queued: t.queued})
	}
	return out
}

// less orders entries: the earlier deadline first, none last, then the
// earlier arrival.
func (q *Queue[T]) less(a, b int32) bool {
	ea, eb := &q.entries[a], &q.entries[b]
	switch {
	case ea.deadline == eb.deadline:
		return ea.seq < eb.seq
	case ea.deadline == 0:
		return false
	case eb.deadline == 0:
		return true
	}
	return ea.deadline < eb.deadline
}

func (q *Queue[T]) push(h []int32, k int32) []int32 {
	h = append(h, k)
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !q.less(h[i], h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	return h
}

func (q *Queue[T]) pop(h []int32) []int32 {
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	q.down(h, 0)
	return h
}

func (q *Queue[T]) down(h []int32, i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && q.less(h[r], h[l]) {
			m = r
		}
		if !q.less(h[m], h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

func (q *Queue[T]) heapify(h []int32) []int32 {
	for i := len(h)/2 - 1; i >= 0; i-- {
		q.down(h, i)
	}
	return h
}

// estimator measures the bandwidth of completions over windows of at
// least bwWindow while something is in flight, smoothed.
type estimator struct {
	rate  float64
	since int64
	bytes uint64
}

const bwWindow = int64(10 * time.Millisecond)

func (e *estimator) start(now int64) {
	if e.since == 0 {
		e.since, e.bytes = now, 0
	}
}

func (e *estimator) done(n uint64, now int64, idle bool) {
	e.bytes += n
	if d := now - e.since; d >= bwWindow || idle && d > 0 {
		r := float64(e.bytes) / (float64(d) / 1e9)
		if e.rate == 0 {
			e.rate = r
		} else {
			e.rate = 0.75*e.rate + 0.25*r
		}
		e.since, e.bytes = now, 0
	}
	if idle {
		e.since = 0 // time with nothing in flight is not measured
	}
}

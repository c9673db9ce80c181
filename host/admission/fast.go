package admission

// The fast path. On an unloaded engine nothing binds: no rate cap
// bounds the request, its in-flight bounds are far from full, nothing
// of its class or above is held back. Such a request needs none of the
// queue's order, so Admit lets it go without the engine's lock, with an
// atomic load of the held-back classes and, for the in-flight bounds
// that exist, one compare-and-swap each; Release gives them back the
// same way. Everything else (a full bound, a cap, a queue ahead, early
// rejection) is Offer's, under the lock, as before; the two share the
// in-flight counts, which reserve changes only when a request fits, so
// that a bound is never overrun by the two racing.

// Admit lets the request r go at now without the engine's lock, when
// nothing binds it (with promotion, nothing held in the class below
// either: Offer looks whether it is promoted), and returns its grant; ok false says it must be
// Offered (under the lock), which decides it: held back, refused, or let
// go after all. It is safe for concurrent use with itself, Release and
// every method the lock guards. Admit is off (always false) with
// RejectLate, which reckons with every request under the lock.
//
// A request Admit lets go is dispatched as Offer would have let it go at
// once: the same class (promotion included), the same budgets counted,
// and its bytes count for its tenant's fair share (Offer and Next fold
// them in before they order anything).
//
// With tl, the request is counted for its tenant (TenantStats, the fair
// share) in tl, and in the queue when Count is called with it: a Submit
// call's requests are counted in one step. Count before Offering, so
// that the fair order sees what Admit let go.
func (q *Queue[T]) Admit(r *Request, now int64, tl *Tally) (g Grant, ok bool) {
	if q.measured {
		return Grant{}, false
	}
	ti := q.dflt
	if r.Tenant != "" {
		if ti, ok = q.byName[r.Tenant]; !ok {
			return Grant{}, false // Offer says why
		}
	}
	t := &q.tenants[ti]
	c := q.class(ClassOf(r.Priority), r.Deadline, now)
	ahead := upTo(c)
	if q.cfg.Promotion > 0 && c < ClassLow {
		ahead = upTo(c + 1) // one held below may be promoted into c: Offer looks
	}
	if t.fast&(1<<c) == 0 || q.heldIn.Load()&ahead != 0 {
		return Grant{}, false
	}
	if !q.reserve(ti, c, r.Length) {
		return Grant{}, false
	}
	if tl == nil {
		t.last.Store(r.Length)
		t.admitted.Add(1)
		t.bytes.Add(r.Length)
	} else {
		if tl.n != 0 && tl.tenant != ti {
			q.Count(tl)
		}
		tl.tenant, tl.n, tl.bytes, tl.last = ti, tl.n+1, tl.bytes+r.Length, r.Length
	}
	return Grant{Length: r.Length, tenant: ti, class: c, ok: true}, true
}

// Tally is what Admit let go for one tenant and has not counted yet.
type Tally struct {
	n, bytes, last uint64
	tenant         uint16
}

// Count counts what tl holds for its tenant and empties it; safe for
// concurrent use as Admit is.
func (q *Queue[T]) Count(tl *Tally) {
	if tl.n == 0 {
		return
	}
	t := &q.tenants[tl.tenant]
	t.last.Store(tl.last)
	t.admitted.Add(tl.n)
	t.bytes.Add(tl.bytes)
	*tl = Tally{}
}

// Release gives back what g held, as Done does, without the lock: for a
// queue without RejectLate (Measured false), whose Done has nothing
// else to do. It is safe for concurrent use with Admit and the locked
// methods. Requests held back for the bounds it frees are not let go by
// it: the caller asks Next, under the lock, when Held says some wait.
func (q *Queue[T]) Release(g Grant) (freed bool) {
	if !g.ok || !q.countedAny {
		return false
	}
	// Every budget gives, whichever bound it.
	freed = q.total.give(g.Length)
	freed = q.classes[g.class].give(g.Length) || freed
	return q.tenants[g.tenant].budget.give(g.Length) || freed
}

// Held reports whether any request is held back; safe without the lock.
func (q *Queue[T]) Held() bool { return q.heldIn.Load() != 0 }

// Measured reports whether Done must be called under the lock with the
// time (RejectLate: the bandwidth of completions and what is in flight
// are measured); otherwise Release is Done.
func (q *Queue[T]) Measured() bool { return q.measured }

// Counted reports whether a grant holds anything Done or Release gives
// back: some budget bounds what is in flight, or RejectLate measures
// it. Without, a grant can be dropped when its request ends.
func (q *Queue[T]) Counted() bool { return q.countedAny || q.measured }

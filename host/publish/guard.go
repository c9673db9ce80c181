package publish

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ferrydev/ferry/host/metastore"
)

// recentWrites is how many of its own latest values a Publisher
// remembers. The guard judges what the key holds when it looks, with
// publishing held off, so that is the newest unless someone else wrote
// (an older one of its own is a replay, repaired as a replacement).
const recentWrites = 8

// repairLogBurst warnings at most per repairLogWindow: under a write or
// delete loop the guard stays readable; Repaired counts every repair, and
// the first warning of the next window says how many went unlogged.
const (
	repairLogBurst  = 5
	repairLogWindow = 10 * time.Second
)

// remember records b as written by this engine; p.mu held.
func (p *Publisher) remember(b []byte) {
	if len(p.recent) == recentWrites {
		copy(p.recent, p.recent[1:])
		p.recent = p.recent[:recentWrites-1]
	}
	p.recent = append(p.recent, b)
}

// ours reports whether v is the newest value this engine wrote; p.mu
// held. An older one of its own is a replay (or a write of someone else
// that happens to equal it): the key must hold the newest, since writes
// go through the lease one at a time and the guard looks with publishing
// held off. With a secret, a validly signed descriptor of this
// incarnation at the newest Seq or above is ours, since nobody else can
// sign one.
func (p *Publisher) ours(v []byte) bool {
	if n := len(p.recent); n > 0 && bytes.Equal(p.recent[n-1], v) {
		return true
	}
	if p.signer == nil {
		return false
	}
	d, err := p.signer.Decode(p.key, v)
	return err == nil && d.Incarnation == p.incarnation && d.Seq >= p.seq
}

// Repaired returns how many times the guard wrote the descriptor back
// after someone else replaced or deleted it.
func (p *Publisher) Repaired() uint64 { return p.repaired.Load() }

// startGuard watches the engine's own key, where the store has watches,
// so that a replacement or a deletion by someone else is logged and
// repaired at once instead of lasting until the next lease refresh. The
// watch is retried with backoff for the engine's life (a metastore that
// is down or busy at the start does not leave the key unguarded; see
// GuardWatch). The guard ends at Close; p.mu held.
func (p *Publisher) startGuard(l metastore.Lease) {
	w, ok := p.store.(metastore.Watcher)
	if !ok {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	rw := &metastore.Rewatch{Name: "own descriptor", Prefix: p.key, W: w, ResyncFirst: true, OnError: func(err error) {
		p.log.Warn("the watch of the engine's own descriptor failed; retrying. Meanwhile a replacement or deletion by someone else lasts until the next lease refresh", "key", p.key, "error", err)
	}}
	p.unguard = cancel
	p.guardWatch.Store(rw)
	p.wg.Add(2)
	go func() {
		defer p.wg.Done()
		rw.Run(ctx)
	}()
	go func() {
		defer p.wg.Done()
		p.guard(ctx, l, rw.Events())
	}()
}

// GuardWatch returns the state of the watch on the engine's own key;
// false before the first publish, or where the store has no watches.
func (p *Publisher) GuardWatch() (metastore.WatchState, bool) {
	rw := p.guardWatch.Load()
	if rw == nil {
		return metastore.WatchState{}, false
	}
	return rw.State(), true
}

func (p *Publisher) guard(ctx context.Context, l metastore.Lease, events <-chan metastore.Event) {
	var window time.Time // start of the current log window
	var logged int       // warnings in it
	var quiet uint64     // repairs not logged since the last warning
	for {
		ev, ok := metastore.Next(ctx, events)
		if !ok {
			return
		}
		if ev.Kind != metastore.Resync && ev.Key != p.key {
			continue // a longer key under the same prefix
		}
		if p.closing.Load() {
			return
		}
		// The event may be stale (the engine published again since):
		// judge what the key holds now, with publishing held off.
		p.mu.Lock()
		v, err := p.read(ctx)
		what := "was replaced by someone else. " + anyoneCan
		switch {
		case errors.Is(err, metastore.ErrNotFound):
			what = gone(ev, p.ttl)
		case err != nil:
			p.mu.Unlock()
			continue // the lease reports the outage
		case p.ours(v):
			p.mu.Unlock()
			continue
		}
		newest := p.recent[len(p.recent)-1]
		cctx, cancel := context.WithTimeout(ctx, p.timeout)
		err = l.Update(cctx, newest)
		cancel()
		p.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		p.repaired.Add(1)
		quiet++
		now := time.Now()
		if now.Sub(window) >= repairLogWindow {
			window, logged = now, 0
		}
		if logged < repairLogBurst {
			logged++
			if err != nil {
				p.log.Warn("the engine's descriptor "+what+"; writing it back failed, the lease retries", "key", p.key, "repairs", quiet, "error", err)
			} else {
				p.log.Warn("the engine's descriptor "+what+"; wrote it back", "key", p.key, "repairs", quiet)
			}
			quiet = 0
		}
	}
}

// anyoneCan is what a repair of someone else's doing adds.
const anyoneCan = "Anyone who can write the metastore can do this: restrict it (see README, Securing the metastore)"

// gone says why the engine's key went, as far as the store's event ev
// tells: a lease that merely expired under load is not someone else's
// doing.
func gone(ev metastore.Event, ttl time.Duration) string {
	switch {
	case ev.Kind == metastore.Delete && ev.Cause == metastore.CauseExpired:
		return fmt.Sprintf("expired: its lease was not refreshed within the metastore's ttl (%s; the engine or the metastore was too slow, e.g. under load; raise metastore.ttl if it repeats)", ttl)
	case ev.Kind == metastore.Delete && ev.Cause == metastore.CauseDeleted:
		return "was deleted by someone else. " + anyoneCan
	}
	return fmt.Sprintf("expired (its lease was not refreshed within the metastore's ttl, %s, e.g. under load) or was deleted by someone else (%s)", ttl, anyoneCan)
}

func (p *Publisher) read(ctx context.Context) ([]byte, error) {
	cctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	return p.store.Get(cctx, p.key)
}

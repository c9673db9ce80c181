package metastore

import (
	"bytes"
	"context"
	"slices"
	"time"
)

// lister returns every key under prefix with its value.
type lister func(ctx context.Context, prefix string) (map[string][]byte, error)

// watchBuffer is how many events a watch holds for a slow receiver before
// it waits for it.
const watchBuffer = 64

// sendEvent hands e to a watch's channel; it reports false, with e
// dropped, when ctx ends first.
func sendEvent(ctx context.Context, ch chan<- Event, e Event) bool {
	select {
	case ch <- e:
		return true
	case <-ctx.Done():
		return false
	}
}

// pollWatch implements Watch by listing prefix every interval and reporting
// the difference. wake, when not nil, lists early (the memory store signals
// its changes); next, when not nil, says how long until the next change
// that no write signals (a lease expiring).
func pollWatch(ctx context.Context, g *group, prefix string, interval time.Duration, list lister,
	wake func() <-chan struct{}, next func() time.Duration) (<-chan Event, error) {
	if interval <= 0 {
		interval = DefaultPollInterval
	}
	var woken <-chan struct{}
	if wake != nil {
		woken = wake() // before the first list, so no change falls between
	}
	snap, err := list(ctx, prefix)
	if err != nil {
		return nil, err
	}
	ch := make(chan Event, watchBuffer)
	err = g.goCtx(ctx, func(ctx context.Context) {
		defer close(ch)
		send := func(e Event) bool { return sendEvent(ctx, ch, e) }
		bo := backoff{min: min(100*time.Millisecond, interval), max: max(interval, 5*time.Second)}
		broken := false
		wait := interval
		for {
			if next != nil {
				wait = min(wait, next())
			}
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-woken:
			case <-ctx.Done():
				t.Stop()
				return
			}
			t.Stop()
			if wake != nil {
				woken = wake()
			}
			lctx, cancel := context.WithTimeout(ctx, max(interval, DefaultTimeout))
			cur, err := list(lctx, prefix)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				broken = true
				wait = bo.next()
				continue
			}
			bo.reset()
			wait = interval
			if broken {
				broken = false
				if !send(Event{Kind: Resync}) {
					return
				}
			}
			for _, e := range diff(snap, cur) {
				if !send(e) {
					return
				}
			}
			snap = cur
		}
	})
	if err != nil {
		return nil, err
	}
	return ch, nil
}

// diff returns the events that turn old into cur, in key order.
func diff(old, cur map[string][]byte) []Event {
	var evs []Event
	for k, v := range cur {
		if ov, ok := old[k]; !ok || !bytes.Equal(ov, v) {
			evs = append(evs, Event{Kind: Put, Key: k, Value: v})
		}
	}
	for k := range old {
		if _, ok := cur[k]; !ok {
			evs = append(evs, Event{Kind: Delete, Key: k})
		}
	}
	slices.SortFunc(evs, func(a, b Event) int {
		if a.Key < b.Key {
			return -1
		}
		if a.Key > b.Key {
			return 1
		}
		return 0
	})
	return evs
}

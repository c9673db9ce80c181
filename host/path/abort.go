package path

import (
	"context"
	"errors"
	"math/bits"
	"sync"
	"time"

	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/internal/pluginclient"
	"github.com/ferrydev/ferry/sdk"
)

// Aborting the slices of ended tasks. A task canceled or timed out while
// its plugin holds slices of it is reported ended only once they are back
// (host/progress, Batch.Finish). A plugin that implements sdk.Aborter is
// asked to give them back early: the tracker's hold hook queues the
// task's tokens here, and one goroutine sends them, a call per plugin,
// off the caller's path. A plugin without it is waited for, and killed if
// it holds them past supervise.end_grace (host/supervisor).

// aborts is the queue of tokens to abort, per plugin index.
type aborts struct {
	mu      sync.Mutex
	pending map[int32][]uint64
	wake    chan struct{}
}

// onHold is the tracker's hold hook: it queues the tokens of task i's
// slices for an abort by its plugin, when that plugin can abort. It must
// not block.
func (e *Executor) onHold(b *progress.Batch, i int) {
	t := b.Task(i)
	idx := t.Transport()
	if idx < 0 || int(idx) >= len(e.plugins) {
		e.cancelStaged(b, i) // a staged task has no transport of its own: its run stops
		return
	}
	if b.Failing(i) {
		e.endOrphan(b, i, e.plugins[idx]) // its slices are on a lane that went down: no abort brings them back
		return
	}
	run := e.plugins[idx].run()
	if run == nil || run.p == nil || !run.p.Implements(sdk.InterfaceAborter) {
		return
	}
	token := b.Token(i)
	a := &e.aborts
	a.mu.Lock()
	if a.pending == nil {
		a.pending = make(map[int32][]uint64)
	}
	q := a.pending[idx]
	for m := t.Rails(); m != 0; m &= m - 1 {
		q = append(q, progress.WithRail(token, bits.TrailingZeros64(m)))
	}
	a.pending[idx] = q
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// abortRetry is a call whose plugin found fewer descriptors than it was
// asked for: a slice may still have been on its way into the plugin (in
// the ring, not yet submitted) when the abort came. It is sent again,
// backing off, until end_grace has passed, when the supervisor kills a
// plugin that still holds an ended task's slices.
type abortRetry struct {
	idx    int32
	tokens []uint64
	at     time.Time     // when to send it again
	delay  time.Duration // the pause before the next one
	until  time.Time     // the last time it is sent
}

// runAborts sends the queued aborts until the engine closes. Owned by the
// engine (e.wg).
func (e *Executor) runAborts() {
	defer e.wg.Done()
	a := &e.aborts
	// Calls in flight end when the engine closes, not at their timeout.
	base, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		select {
		case <-e.quit:
			stop()
		case <-base.Done():
		}
	}()
	grace := e.cfg.Supervise.WithDefaults().EndGrace
	var retries []abortRetry
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		timer.Reset(time.Hour)
		if len(retries) > 0 {
			next := retries[0].at
			for _, r := range retries[1:] {
				if r.at.Before(next) {
					next = r.at
				}
			}
			timer.Reset(max(time.Until(next), 0))
		}
		select {
		case <-a.wake:
		case <-timer.C:
		case <-e.quit:
			return
		}
		a.mu.Lock()
		batch := a.pending
		a.pending = nil
		a.mu.Unlock()
		now := time.Now()
		var calls []abortRetry
		for idx, tokens := range batch {
			calls = append(calls, abortRetry{idx: idx, tokens: tokens, delay: abortFirstRetry, until: now.Add(grace)})
		}
		keep := retries[:0]
		for _, r := range retries {
			if now.Before(r.at) {
				keep = append(keep, r)
			} else {
				calls = append(calls, r)
			}
		}
		retries = keep
		for _, c := range calls {
			ps := e.plugins[c.idx]
			run := ps.run()
			if run == nil || run.p == nil || !ps.usable() {
				continue // gone: the supervisor's Down hook ends its held tasks
			}
			ctx, cancel := context.WithTimeout(base, ControlTimeout)
			n, err := run.p.Client.Abort(ctx, c.tokens)
			cancel()
			switch {
			case errors.Is(err, pluginclient.ErrUnimplemented):
			case err != nil:
				e.log.Warn("abort of ended tasks' slices failed; waiting for their completions (the plugin is killed if it holds them past supervise.end_grace)",
					"plugin", ps.name, "tokens", len(c.tokens), "error", err)
			default:
				e.log.Debug("aborted ended tasks' slices", "plugin", ps.name, "tokens", len(c.tokens), "found", n)
				if n < len(c.tokens) && time.Now().Before(c.until) {
					c.at, c.delay = time.Now().Add(c.delay), min(2*c.delay, abortMaxRetry)
					retries = append(retries, c)
				}
			}
		}
	}
}

// The pauses between abort calls for slices a plugin did not find yet.
const (
	abortFirstRetry = 5 * time.Millisecond
	abortMaxRetry   = time.Second
)

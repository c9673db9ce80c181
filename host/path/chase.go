package path

import (
	"context"
	"sync"
	"time"
)

// Chasing a target nothing watches. A failover that waits for its target
// (the target's plugin is gone or restarting, or moved to a new
// endpoint) ends when the segment's handle changes: with a metastore,
// its watch reads the target's next descriptor. A handle opened in
// peer-to-peer mode has no watch, so the executor reads the descriptor
// again from the peer's control service (Deps.Reread) until the handle
// changes, the retry budget is spent or the executor closes: the
// failover then wakes, finds the target moved, and retries at once.

// Pauses between two reads of a chased descriptor: the first is soon
// (an upgraded plugin's new run serves before the old one stops), the
// later ones double up to the last.
const (
	chaseFirst = 50 * time.Millisecond
	chaseMax   = time.Second
)

// chasers are the segments being chased, one goroutine each, owned by
// the executor (wg) and ended by its quit.
type chasers struct {
	mu     sync.Mutex
	closed bool
	ids    map[uint32]bool
}

// close starts no chase from now on; the running ones watch quit.
func (c *chasers) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
}

// chase reads rem's descriptor again, in a goroutine, until its handle
// changes (the table's change wakes the failovers that wait for it),
// unless rem is watched (the metastore's watch does it), imported, or
// being chased already.
func (e *Executor) chase(rem *remote) {
	if e.reread == nil || rem == nil || rem.Key != "" || rem.Imported || rem.Retired != "" {
		return
	}
	c := &e.chasing
	c.mu.Lock()
	if c.closed || c.ids[rem.ID] {
		c.mu.Unlock()
		return
	}
	if c.ids == nil {
		c.ids = map[uint32]bool{}
	}
	c.ids[rem.ID] = true
	e.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer e.wg.Done()
		defer func() {
			c.mu.Lock()
			delete(c.ids, rem.ID)
			c.mu.Unlock()
		}()
		e.chaseLoop(rem)
	}()
}

func (e *Executor) chaseLoop(rem *remote) {
	end := time.Now().Add(e.retryBudget())
	pause := chaseFirst
	t := time.NewTimer(pause)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-e.quit:
			return
		}
		if e.remote(SegmentID(rem.ID)) != rem {
			return // changed meanwhile (a reopen by the application)
		}
		ctx, cancel := context.WithTimeout(context.Background(), min(chaseMax, time.Until(end)))
		changed, err := e.reread(ctx, rem)
		cancel()
		if changed || !time.Now().Before(end) {
			return
		}
		if err != nil {
			e.log.Debug("re-reading a peer's descriptor after a failure found it away", "segment", rem.Name, "error", err)
		}
		pause = min(2*pause, chaseMax)
		t.Reset(pause)
	}
}

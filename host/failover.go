package host

import (
	"context"
	"fmt"
	"time"

	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/host/selector"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Failover. A task whose attempt failed, because a slice came back with
// an error that blames its path (peer unreachable, I/O, a timeout in the
// plugin) or because its plugin died or could not take it, is not ended
// FAILED while it has attempts left (transfer.attempts, default 3, the
// first included). It stays PENDING and is tried again:
//
//   - on another rail of the same transport, keeping off the rails that
//     failed it, while the transport has one;
//   - else on the next transport of the selector's plan not tried yet, the
//     request's transport hint left out of the choice; when every one was
//     tried, on one that was restarted meanwhile (waiting up to
//     failoverWait for a restarting plugin);
//   - a task pinned by Request.Transport stays on its transport: another
//     rail, or the same plugin once restarted. It is never moved to
//     another transport behind the caller's back.
//
// Every attempt moves the same bytes between the same ranges, so this is
// safe for reads and writes alike. Completions of an earlier attempt are
// dropped (the ring token carries the attempt), so a task ends once. The
// batch API and Transfer both get this; the task's state and error are its
// last attempt's.

// failoverWait bounds how long a failover waits for a transport to come
// back (a restarting plugin) when every usable one was tried already.
const failoverWait = 5 * time.Second

// batchExt is what the engine keeps with a batch: each task's request and
// its failover history.
type batchExt struct {
	tasks []taskExt
}

type taskExt struct {
	req   Request
	tried uint64 // plugins (bit = index) that carried an attempt
	avoid uint64 // rails of the current transport that failed an attempt
}

// attachExt gives b room for its tasks' requests, reusing what a previous
// use of the batch left.
func attachExt(b *progress.Batch) {
	x, _ := b.Ext.(*batchExt)
	if x == nil {
		x = &batchExt{}
		b.Ext = x
	}
	if cap(x.tasks) < b.Cap() {
		x.tasks = make([]taskExt, b.Cap())
	}
	x.tasks = x.tasks[:b.Cap()]
}

func ext(b *progress.Batch) *batchExt { return b.Ext.(*batchExt) }

// retryJob is one failed attempt handed to a failover goroutine.
type retryJob struct {
	token  uint64 // the task's, at the failed attempt
	i      int
	cause  error // the plugin died or refused the slices; nil: see status
	status ring.Status
	rail   int   // of the first failed slice, -1 if none
	from   int32 // the transport of the failed attempt
	te     taskExt
}

// onFailure is the tracker's failure hook: it takes a failed attempt for
// failover when the failure is one another attempt can fix and attempts
// are left. It must not block: the work is done in a goroutine.
func (e *Engine) onFailure(b *progress.Batch, i int, cause error) bool {
	if b.Attempt(i)+1 >= e.cfg.Transfer.Attempts {
		return false
	}
	t := b.Task(i)
	st := t.SliceStatus()
	if cause == nil && !railFault(st) {
		return false // refused for what it asked: another attempt would be too
	}
	e.retryMu.Lock()
	defer e.retryMu.Unlock()
	if e.retryClosed {
		return false
	}
	e.retrying.Add(1)
	job := retryJob{token: b.Token(i), i: i, cause: cause, status: st, rail: t.FailedRail(), from: t.Transport(), te: ext(b).tasks[i]}
	go e.failover(job)
	return true
}

// failover runs the next attempt of a task, or ends it FAILED when there
// is nowhere to run it.
func (e *Engine) failover(j retryJob) {
	defer e.retrying.Done()
	r := &j.te.req
	why := j.cause
	if why == nil {
		why = statusErr(j.status)
	}
	to, avoid := int32(-1), j.te.avoid
	if railFault(j.status) && e.otherRail(j.from, j.rail, &avoid) {
		to = j.from
	} else {
		avoid = 0 // rails are per transport
		to = e.failoverTarget(r, j.te.tried, j.from)
	}
	b, i, release := e.tracker.Hold(j.token)
	if b == nil {
		return // the batch was freed, or the task moved on
	}
	defer release()
	if to < 0 {
		b.Finish(i, progress.Failed, why)
		return
	}
	rem := e.remote(r.Segment)
	rt, err := e.routeTo(r, rem, e.plugins[to])
	if err != nil {
		b.Finish(i, progress.Failed, fmt.Errorf("%v; failover to %q: %w", why, e.plugins[to].name, err))
		return
	}
	if !b.Retry(i) {
		return // canceled or timed out meanwhile
	}
	te := &ext(b).tasks[i]
	te.tried |= 1 << to
	te.avoid = avoid
	e.log.Warn("task failed; trying it again", "segment", rem.Name, "from", e.plugins[j.from].name, "failed_rail", j.rail,
		"to", e.plugins[to].name, "attempt", b.Attempt(i)+1, "of", e.cfg.Transfer.Attempts, "error", why)
	var sc submitCtx
	e.dispatch(b, i, r, rem, rt, avoid, &sc)
}

// routeTo is route with the plugin chosen, as a transport hint: the
// ranges are translated again (the segment may have changed under a
// restarted peer) and the plugin is checked to reach the segment now.
func (e *Engine) routeTo(r *Request, rem *remote, ps *pluginState) (routed, error) {
	pinned := *r
	pinned.Transport = ps.name
	return e.route(&pinned, rem)
}

// otherRail reports whether transport tr can retry a task whose slice
// failed on rail, keeping off the rails in *avoid (to which it adds rail).
func (e *Engine) otherRail(tr int32, rail int, avoid *uint64) bool {
	if tr < 0 || rail < 0 || rail >= progress.MaxRails {
		return false
	}
	ps := e.plugins[tr]
	rs := ps.rails.Load()
	if rs == nil || !ps.usable() {
		return false
	}
	*avoid |= 1 << rail
	return rs.all(0)&^*avoid != 0
}

// failoverTarget picks the transport for r's next attempt after one on
// from failed: for a pinned request, from itself once usable; else the
// first of the selector's plan (hint left out) not in tried, or, when
// every usable one was tried, the first of the plan once none of those is
// restarting. It waits up to failoverWait for a restarting plugin; -1
// when there is nowhere to go.
func (e *Engine) failoverTarget(r *Request, tried uint64, from int32) int32 {
	rem := e.remote(r.Segment)
	if rem == nil || rem.Retired != "" {
		return -1
	}
	ctx, cancel := context.WithTimeout(context.Background(), failoverWait)
	defer cancel()
	cands := make([]selector.Transport, len(e.plugins))
	for {
		if r.Transport != "" {
			if from >= 0 && e.plugins[from].usable() {
				return from
			}
		} else {
			sr := e.selectorFacts(r, rem, uint64(len(r.Local)), cands)
			sr.Hint = ""
			if p, err := e.sel.Select(&sr, cands); err == nil {
				for _, i := range p.Index {
					if tried&(1<<i) == 0 {
						return int32(i)
					}
				}
				if len(p.Index) > 0 && !e.anyDown(tried) {
					return int32(p.Index[0])
				}
			}
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return -1
		case <-e.quit:
			t.Stop()
			return -1
		}
	}
}

// anyDown reports whether one of the plugins in mask is restarting.
func (e *Engine) anyDown(mask uint64) bool {
	for i, ps := range e.plugins {
		if mask&(1<<i) != 0 && ps.err == nil && ps.down() {
			return true
		}
	}
	return false
}

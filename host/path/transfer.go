package path

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/internal/enum"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Op is what a request does.
type Op uint8

const (
	// Read copies from the remote segment into local memory.
	Read Op = 1
	// Write copies from local memory into the remote segment.
	Write Op = 2
)

var opNames = [...]string{Read: "read", Write: "write"}

func (o Op) String() string { return enum.String(o, opNames[:], "op") }

// Priority orders requests under load; the SDK's type, which the ring
// descriptor carries.
type Priority = sdk.Priority

const (
	PriorityNormal = sdk.PriorityNormal
	PriorityHigh   = sdk.PriorityHigh
	PriorityLow    = sdk.PriorityLow
)

// Request is one transfer between local memory and a remote segment.
type Request struct {
	Op Op
	// Local is the local range: registered memory of this engine. Its
	// length is the transfer's length.
	Local []byte
	// Segment is a handle from OpenSegment.
	Segment SegmentID
	// Remote is the address in the remote segment, as listed in its
	// descriptor (the owner's virtual address).
	Remote   uint64
	Priority Priority
	// Deadline, when set, ends the task TIMEOUT if it has not completed by
	// then. A request that sets none gets transfer.default_deadline from
	// its Submit (30 s unless configured; "0s" leaves it without one),
	// except in a Transfer whose context has a deadline: that one bounds
	// it.
	Deadline time.Time
	// Transport pins the transport (a plugin name) of the first attempt;
	// "" lets the engine choose. A hint that cannot reach the segment
	// makes the task INVALID: the engine never falls back silently.
	Transport string
	// Intent says what the request is for, one of the Intent constants or
	// ""; policies match on it.
	Intent Intent
	// Tenant names who the request is for, for the qos block's fair
	// shares and budgets; "" is the default tenant. Without a qos block
	// it is not read.
	Tenant string
	// Policy, when set, names the configured policy that chooses the
	// transports, whatever its match conditions say.
	Policy string
	// Trace asks the engine to keep this task's story (every stage, its
	// times, transports, retries and the selector's reasons) for
	// Engine.Traces and `ferry status --traces`, when the configuration
	// has a trace block; without one it does nothing.
	Trace bool
}

// deadline returns Deadline in unix nanoseconds, 0 for none.
func (r *Request) deadline() int64 {
	if r.Deadline.IsZero() {
		return 0
	}
	return r.Deadline.UnixNano()
}

// BatchID names a batch from AllocateBatch.
type BatchID struct {
	b *progress.Batch
	// id is the batch's progress.Batch.ID when it was allocated: a freed
	// batch's record is reused, and its next life has another.
	id uint64
}

// live returns the batch id names, or an error saying why there is none
// (a zero BatchID, or one already freed); what says which call asked.
func (e *Executor) live(id BatchID, what string) (*progress.Batch, error) {
	if id.b == nil {
		return nil, fmt.Errorf("%w: %s: zero BatchID", ErrInvalid, what)
	}
	if id.b.ID() != id.id || !e.tracker.Live(id.b) {
		return nil, fmt.Errorf("%w: %s: the batch was freed (FreeBatch); its tasks are gone", ErrInvalid, what)
	}
	return id.b, nil
}

// Done reports whether every task of the batch has ended.
func (s BatchStatus) Done() bool { return s.Pending == 0 }

// AllocateBatch is host.Engine.AllocateBatch, which documents it.
func (e *Executor) AllocateBatch(capacity int) (BatchID, error) {
	if e.closed.Load() {
		return BatchID{}, ErrClosed
	}
	b, err := e.tracker.Allocate(capacity)
	if err != nil {
		return BatchID{}, fmt.Errorf("%w: allocate batch: %w", ErrInvalid, err)
	}
	e.path.attach(b)
	return BatchID{b: b, id: b.ID()}, nil
}

// FreeBatch is host.Engine.FreeBatch, which documents it.
func (e *Executor) FreeBatch(id BatchID) error {
	if id.b == nil {
		return fmt.Errorf("%w: free batch: zero BatchID", ErrInvalid)
	}
	if _, err := e.live(id, "free batch"); err != nil {
		return nil // freed already
	}
	if !id.b.Done(0) {
		id.b.Cancel()
		if err := e.awaitEnded(id.b); err != nil {
			e.log.Warn("batch freed while a plugin still holds slices of its tasks", "error", err)
		}
	}
	e.settleNotifies(id.b)      // decide its SubmitWithNotify submissions before reuse
	e.forgetHeld(id.b)          // none of its tasks held back by admission is taken on after this
	if e.tracker.Pinned(id.b) { // the bound is worked out only when needed: it copies the supervise settings
		e.tracker.AwaitUnpinned(id.b, e.endBound()) // a failover or QoS resume still at one of its tasks lets go
	}
	slot, n := id.b.Slot(), id.b.Len()
	e.creditFree(slot, n)
	if e.tracker.Free(id.b) {
		e.path.detach(slot, n)
	}
	return nil
}

// taskResult is one task's terminal state as Transfer reports it.
type taskResult struct {
	state     State
	err       error
	transport int32
	recheck   bool // the plugin failed it; recheck the peer
	status    ring.Status
	attempts  int
}

// Transfer is host.Engine.Transfer, which documents it.
func (e *Executor) Transfer(ctx context.Context, reqs ...Request) error {
	res, werr := e.runBatch(ctx, reqs)
	if res == nil {
		return werr
	}
	var errs []error
	checked := map[SegmentID]string{} // recheck's findings, once per segment
	for i, tr := range res {
		if tr.state == progress.Completed {
			continue
		}
		r := &reqs[i]
		te := &TransferError{Task: i, Op: r.Op, Remote: r.Remote, Length: uint64(len(r.Local)), State: tr.state, Err: tr.err}
		if te.Err == nil { // still PENDING: the wait gave up (werr says why) while a plugin holds slices of it
			te.Err = fmt.Errorf("%w: the task had not ended when the wait gave up; its buffer is not safe to reuse", ErrPluginFailed)
		}
		if rem := e.remote(r.Segment); rem != nil {
			te.Segment = rem.Name
			if tr.recheck {
				te.Err = e.recheck(ctx, rem, tr.status, te.Err, checked)
			}
		}
		if tr.transport >= 0 {
			te.Transport = e.plugins[tr.transport].name
		}
		if tr.attempts > 1 {
			te.Err = fmt.Errorf("%w (after %d attempts)", te.Err, tr.attempts)
		}
		errs = append(errs, te)
	}
	if len(errs) == 0 {
		return nil
	}
	if werr != nil {
		errs = append(errs, werr)
	}
	return errors.Join(errs...)
}

// runBatch runs reqs as one batch and reports each task's end. It returns
// a nil slice only when the batch could not be submitted.
func (e *Executor) runBatch(ctx context.Context, reqs []Request) ([]taskResult, error) {
	id, err := e.AllocateBatch(max(len(reqs), 1))
	if err != nil {
		return nil, err
	}
	defer e.FreeBatch(id)
	_, bounded := ctx.Deadline()
	var total uint64
	for k := range reqs {
		total += uint64(len(reqs[k].Local))
	}
	// Wait enters the lanes of a small batch and reaps them itself.
	waiter := total <= sdk.SmallBatch
	if err := e.submit(id, reqs, submitCtx{bounded: bounded, waiter: waiter}); err != nil {
		return nil, err
	}
	werr := e.Wait(ctx, id)
	out := make([]taskResult, len(reqs))
	now := progress.Now()
	for i := range id.b.Len() {
		t := id.b.Task(i)
		s := id.b.State(i, now)
		out[i] = taskResult{state: s, transport: t.Transport(), attempts: id.b.Attempt(i) + 1}
		if s != progress.Completed {
			out[i].err = e.taskErr(id.b, i, s)
			out[i].recheck = t.Err() == nil && s == progress.Failed
			out[i].status = t.SliceStatus()
		}
	}
	return out, werr
}

// Number is the number observer events give the batch
// (observe.Event.Batch), 0 for a zero BatchID.
func (id BatchID) Number() uint64 {
	if id.b == nil {
		return 0
	}
	return id.b.ID()
}

package host

import (
	"context"
)

// AllocateBatch returns a batch that holds up to capacity tasks.
func (e *Engine) AllocateBatch(capacity int) (BatchID, error) { return e.x.AllocateBatch(capacity) }

// FreeBatch releases a batch. Tasks still pending are canceled first,
// and FreeBatch returns once they have ended (no plugin touches their
// memory), within the bound Wait has after a cancel; freeing a batch
// twice does nothing.
func (e *Engine) FreeBatch(id BatchID) error { return e.x.FreeBatch(id) }

// Submit validates each request, routes it and publishes its slices. A
// request that fails validation becomes an INVALID task; it does not stop
// the others. Submit returns an error only when the batch cannot take the
// requests at all.
//
// A two-sided transport's (tcp's) slices take the receiver's credit first
// (docs/credit.md): Submit waits for it when the receiver has none to
// spare, up to each request's deadline.
func (e *Engine) Submit(id BatchID, reqs ...Request) error { return e.x.Submit(id, reqs...) }

// TaskStatus returns task i of the batch. Of a pending task it first
// reaps the completion rings of the plugin that carries it (never
// blocking), so that a caller that submits and polls status drives its
// transfers to completion itself, as one that waits does; see reapTask.
//
// A task canceled or timed out is reported so only once no plugin can
// touch its memory: until every slice it had out came back (aborted,
// where the plugin can) or their plugin was killed, it reads PENDING.
// See the package documentation, "What ended means".
func (e *Engine) TaskStatus(id BatchID, i int) (TaskStatus, error) { return e.x.TaskStatus(id, i) }

// TaskStatusList fills out with the statuses of tasks first,
// first+1, ... of the batch, as many as out holds or the batch has, and
// returns how many it filled (TENT's tent_task_status_list). It
// allocates nothing for tasks that are pending or completed; the Err of
// a task that ended otherwise is built as TaskStatus builds it. When one
// of them is pending it first reaps the batch's completion rings, as
// TaskStatus does.
func (e *Engine) TaskStatusList(id BatchID, first int, out []TaskStatus) (int, error) {
	return e.x.TaskStatusList(id, first, out)
}

// CancelTask cancels task i of the batch, leaving its other tasks
// alone. The task ends CANCELED, or as it ended if it ended first (it
// completed, say): once, whichever comes first. Its slices not yet sent
// never leave; the ones a plugin holds are aborted where the plugin can
// (sdk.Aborter), and otherwise their completions are dropped. CancelTask
// does not wait: the task reads CANCELED once no plugin touches its
// memory (Wait and TaskStatus see it then). Canceling a task that does
// not exist, or of a freed batch, is an error (ErrInvalid).
func (e *Engine) CancelTask(id BatchID, i int) error { return e.x.CancelTask(id, i) }

// BatchStatus sums the batch's tasks. Of a batch not done it first reaps
// the completion rings of the plugins that carry it, as TaskStatus does.
func (e *Engine) BatchStatus(id BatchID) (BatchStatus, error) { return e.x.BatchStatus(id) }

// Cancel ends every pending task of the batch CANCELED, as CancelTask
// does each: it does not wait for them to end.
func (e *Engine) Cancel(id BatchID) error { return e.x.Cancel(id) }

// Wait blocks until every task of the batch has ended or ctx ends; when
// ctx ends first, the pending tasks are canceled (TIMEOUT if ctx's deadline
// passed) and ctx's error is returned once they have ended. A task ends
// only when no plugin touches its memory any more, so after ctx ends Wait
// still waits for the slices in flight to come back (aborted, where the
// plugin can), for at most supervise.end_grace and the kill of a plugin
// that holds them past it; see "What ended means" in the package
// documentation.
//
// For a short while Wait drains the completion rings itself: a completion
// that arrives within the spin budget reaches the caller without waking
// the reaper goroutine and handing over through a channel.
func (e *Engine) Wait(ctx context.Context, id BatchID) error { return e.x.Wait(ctx, id) }

// Transfer submits reqs as one batch, waits for all of them and returns
// nil if all completed, or an error listing each task that did not. It
// returns when ctx ends, canceling what is still pending. Failed tasks
// are failed over by the engine as in the batch API (see Submit).
func (e *Engine) Transfer(ctx context.Context, reqs ...Request) error {
	return e.x.Transfer(ctx, reqs...)
}

// PrepareBlocks describes a block list: local blocks laid out as ll from
// local[0], remote blocks laid out as rl from address remote of segment
// seg. Both layouts need one block size. Every layer must lie inside
// local and inside one buffer registered with this engine, and inside
// one buffer of the segment's descriptor; this is checked here, once.
func (e *Engine) PrepareBlocks(seg SegmentID, local []byte, ll BlockLayout, remote uint64, rl BlockLayout) (*BlockList, error) {
	return e.x.PrepareBlocks(seg, local, ll, remote, rl)
}

// SubmitBlocks submits a block transfer for each pair: task by task as
// Submit does, but with one check of the call (op, segment, permission,
// every index) before anything is added, and with pairs merged into runs
// (see the package comment). An error means nothing was added.
func (e *Engine) SubmitBlocks(id BatchID, l *BlockList, br BlockRequest, pairs []BlockPair) (BlockTasks, error) {
	return e.x.SubmitBlocks(id, l, &br, pairs)
}

// SubmitBlockRange submits the n pairs (local+k, remote+k), as
// SubmitBlocks does.
func (e *Engine) SubmitBlockRange(id BatchID, l *BlockList, br BlockRequest, local, remote uint32, n int) (BlockTasks, error) {
	return e.x.SubmitBlockRange(id, l, &br, local, remote, n)
}

// Explain says which transport the engine would choose for req and why:
// the policy that matched (or that none did), each transport considered
// and why it was taken or skipped. It submits nothing, and req.Local need
// not be registered: only its length counts. When the request could not
// be carried the explanation is returned with the error.
func (e *Engine) Explain(req Request) (string, error) { return e.x.Explain(req) }

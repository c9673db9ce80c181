package host

import (
	"github.com/ferrydev/ferry/host/path"
	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/internal/intent"
)

// The request path's types. The request path is host/path's (one stage
// sequence for every task); the engine is its public face, and these are
// the names its callers use.

// Op is what a request does: Read or Write.
type Op = path.Op

const (
	// Read copies from the remote segment into local memory.
	Read = path.Read
	// Write copies from local memory into the remote segment.
	Write = path.Write
)

// Priority orders requests under load; the SDK's type, which the ring
// descriptor carries.
type Priority = path.Priority

const (
	PriorityNormal = path.PriorityNormal
	PriorityHigh   = path.PriorityHigh
	PriorityLow    = path.PriorityLow
)

// Request is one transfer between local memory and a remote segment;
// path.Request documents its fields.
type Request = path.Request

// SegmentID is a handle from OpenSegment.
type SegmentID = path.SegmentID

// BatchID names a batch from AllocateBatch.
type BatchID = path.BatchID

// TaskStatus is one task's state; BatchStatus sums a batch.
type (
	TaskStatus  = path.TaskStatus
	BatchStatus = path.BatchStatus
)

// Intent says what a request is for; policies match on it.
type Intent = path.Intent

// Intents a request may declare in Request.Intent; policies match on them.
const (
	IntentForegroundGet      = intent.ForegroundGet
	IntentBackgroundPrefetch = intent.BackgroundPrefetch
	IntentMigration          = intent.Migration
	IntentCheckpoint         = intent.Checkpoint
	IntentWeightLoading      = intent.WeightLoading
)

// Prepared block lists (PrepareBlocks): layouts, pairs, the list, the
// request each task copies, and the tasks a submission added.
type (
	BlockLayout  = path.BlockLayout
	BlockPair    = path.BlockPair
	BlockList    = path.BlockList
	BlockRequest = path.BlockRequest
	BlockTasks   = path.BlockTasks
)

// State is a task's state; see the constants.
type State = path.State

// Task states.
const (
	StatePending   = progress.Pending
	StateCompleted = progress.Completed
	StateFailed    = progress.Failed
	StateCanceled  = progress.Canceled
	StateTimeout   = progress.Timeout
	StateInvalid   = progress.Invalid
)

// TransferError describes why one task of a Transfer did not complete.
type TransferError = path.TransferError

// The error taxonomy of the public API. Every error the engine returns
// wraps one of these (errors.Is) and names the segment, plugin or address
// involved.
var (
	// ErrNotRegistered: a local range is not inside one buffer
	// registered with this engine (Engine.Register).
	ErrNotRegistered = path.ErrNotRegistered
	// ErrOutOfBounds: a remote range runs past its buffer, or lies in
	// none of the segment's.
	ErrOutOfBounds = path.ErrOutOfBounds
	// ErrPermission: the remote buffer does not allow the op (a write to
	// a read-only region, say).
	ErrPermission = path.ErrPermission
	// ErrSegmentNotFound: the segment handle is not open, or the segment
	// restarted or left (open it again).
	ErrSegmentNotFound = path.ErrSegmentNotFound
	// ErrTransportUnavailable: no transport reaches the segment, or the
	// one the request pins cannot.
	ErrTransportUnavailable = path.ErrTransportUnavailable
	// ErrPluginFailed: the plugin that carried the task died, stalled or
	// failed it, and failover could not move it.
	ErrPluginFailed = path.ErrPluginFailed
	// ErrDeadlineExceeded: the task's deadline passed (TIMEOUT).
	ErrDeadlineExceeded = path.ErrDeadlineExceeded
	// ErrCanceled: the task was canceled (CANCELED).
	ErrCanceled = path.ErrCanceled
	// ErrInvalid: the call or the request is malformed, or admission
	// refused it.
	ErrInvalid = path.ErrInvalid
	// ErrClosed: the engine is closed.
	ErrClosed = path.ErrClosed
	// ErrBusy is a request refused because the qos block's queue is full
	// (qos.max_queued) and qos.busy is "error": submit it again later.
	ErrBusy = path.ErrBusy
)

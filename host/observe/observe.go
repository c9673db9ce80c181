package observe

import (
	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/internal/enum"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Stage is a transition of a task through the request path.
type Stage uint8

// The stages, in the order a task passes them. An attempt that fails
// over goes Retried, then Routed, Sliced, Submitted (and Completed)
// again; Ended comes once per task, last.
const (
	// Queued: the task took its place in its batch.
	Queued Stage = iota + 1
	// Admitted: admission let it go on.
	Admitted
	// Routed: its transport was chosen and its ranges translated
	// (Transport names it).
	Routed
	// Sliced: its attempt was cut (Slices says into how many).
	Sliced
	// Submitted: its slices go onto a lane of the transport. It is
	// reported before the first slice is published, so it always
	// precedes the attempt's Completed.
	Submitted
	// Completed: every slice of the attempt came back from the plugin
	// (Status is the first failing one's, StatusOK if none failed).
	Completed
	// Retried: failover started another attempt (Attempt is the new
	// one's number; Err is why the previous one failed).
	Retried
	// Ended: the task reached its terminal state (State; Err when the
	// engine recorded a cause).
	Ended
)

var stageNames = [...]string{Queued: "queued", Admitted: "admitted", Routed: "routed", Sliced: "sliced", Submitted: "submitted", Completed: "completed", Retried: "retried", Ended: "ended"}

func (s Stage) String() string { return enum.String(s, stageNames[:], "stage") }

// Event is one transition of one task.
type Event struct {
	Stage Stage
	// Batch and Task name the task: Batch is unique among the batches
	// of one engine, Task is the index in it.
	Batch uint64
	Task  int
	// Attempt numbers the task's attempts from 0.
	Attempt int
	// Transport is the plugin carrying the attempt; "" before Routed.
	Transport string
	// Length is the task's length in bytes.
	Length uint64
	// Op and Priority are the request's.
	Op       ring.Op
	Priority sdk.Priority
	// At is when the transition happened (0 for Routed and Sliced, which
	// follow Admitted or Retried at once and are not timed), and Since
	// when the one it is timed from did, both in nanoseconds of the
	// engine's monotonic clock (Clock). Since is set for Admitted (from
	// Queued), Submitted
	// (from Admitted, or from Retried for a later attempt), Completed
	// (from the attempt's Submitted) and Ended (from Queued: end to end);
	// 0 otherwise.
	At, Since int64
	// From is the failed attempt's transport and Cause why it failed, in
	// a word (Retried): "plugin_failed" when its plugin died or refused
	// the slices, else the first failing slice status (StatusCause).
	From  string
	Cause string
	// Trace says the request asked for its story to be kept
	// (Request.Trace); Reasons, on a Routed event of a traced task, is the
	// selector's explanation of the route (host/trace).
	Trace   bool
	Reasons string
	// Slices is how many slices the attempt was cut into (Sliced,
	// Submitted).
	Slices int64
	// Status is the first failing slice status (Completed).
	Status ring.Status
	// State is the terminal state (Ended).
	State progress.State
	// Err is why an attempt was retried, or why the task ended when the
	// engine recorded a cause; nil otherwise.
	Err error
}

// Observer sees every transition of every task of an engine. Observe is
// called on the request path, from the goroutine that made the
// transition, while the task's reporting is held so that nothing of a
// task is reported after its Ended: it must be quick, must not block and
// must not call the engine. Events of different tasks arrive
// concurrently. The Event is a copy: keep it if needed.
type Observer interface {
	Observe(Event)
}

// Clock returns the engine's monotonic clock, in nanoseconds since the
// process started: Event.At and Event.Since read it, and an observer
// that needs the time now reads it too. A wall clock's steps do not move
// it. It is progress.Clock, the clock of the times the tracker hands its
// watcher.
func Clock() int64 { return progress.Clock() }

// CausePluginFailed is a Retried event's Cause when the attempt's plugin
// died under it or could not take its slices.
const CausePluginFailed = "plugin_failed"

var statusCauses = [...]string{
	ring.StatusOK: "ok", ring.StatusInvalid: "invalid", ring.StatusNotRegistered: "not_registered",
	ring.StatusOutOfBounds: "out_of_bounds", ring.StatusPermission: "permission",
	ring.StatusStaleIncarnation: "stale_incarnation", ring.StatusPeerUnknown: "peer_unknown",
	ring.StatusPeerUnreachable: "peer_unreachable", ring.StatusIO: "io", ring.StatusTimeout: "timeout",
	ring.StatusCanceled: "canceled", ring.StatusUnsupported: "unsupported", ring.StatusProtocol: "protocol",
	ring.StatusShutdown: "shutdown",
}

// StatusCause is a Retried event's Cause for an attempt whose first
// failing slice came back with st: one lower-case word per status, fit
// for a metric label, and "unknown" for a status this version does not
// know (a plugin's), so that the words stay few.
func StatusCause(st ring.Status) string {
	if st >= 0 && int(st) < len(statusCauses) && statusCauses[st] != "" {
		return statusCauses[st]
	}
	return "unknown"
}

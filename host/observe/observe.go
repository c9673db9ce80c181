package observe

import (
	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/internal/enum"
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

package supervisor

import "github.com/ferrydev/ferry/internal/enum"

// State is where a plugin is in its life.
type State uint32

const (
	// Starting: its first run is being launched (during engine start).
	Starting State = iota
	// Running: its current run serves; the request path may use it.
	Running
	// Down: its process exited (or was killed as stalled); a restart
	// is due after the backoff.
	Down
	// Restarting: a restart attempt is under way.
	Restarting
	// Failed: it could not start at engine start and is not retried
	// (missing binary, checksum, probe says unavailable, start refused).
	Failed
)

var stateGoNames = [...]string{Starting: "Starting", Running: "Running", Down: "Down", Restarting: "Restarting", Failed: "Failed"}

// GoString names s as in this package: Starting, Running, Down,
// Restarting, Failed.
func (s State) GoString() string { return enum.String(s, stateGoNames[:], "State") }

var stateNames = [...]string{Starting: "starting", Running: "running", Down: "restarting", Restarting: "restarting", Failed: "failed"}

// String returns the word operators see for s. Down and Restarting are
// both "restarting": the engine is bringing the plugin back.
func (s State) String() string { return enum.String(s, stateNames[:], "State") }

// Event is what happens to a plugin.
type Event uint8

const (
	// Launched: a run (the first, or a restart's, with its memory and
	// peers replayed) is ready to serve.
	Launched Event = iota
	// Refused: the first run could not start.
	Refused
	// Exited: the current run's process exited or was killed.
	Exited
	// Attempt: a restart attempt begins.
	Attempt
	// AttemptFailed: that attempt did not bring the plugin back.
	AttemptFailed
	// Upgraded: a live upgrade's run (a new binary, replayed) replaced
	// the running one, which drains beside it (Set.Upgrade).
	Upgraded
)

var eventNames = [...]string{Launched: "launched", Refused: "refused", Exited: "exited", Attempt: "attempt", AttemptFailed: "attempt failed", Upgraded: "upgraded"}

func (ev Event) String() string { return enum.String(ev, eventNames[:], "Event") }

// Next returns the state a plugin in s moves to on ev, and false (with s
// unchanged) when ev cannot happen in s: a plugin that failed at start
// never restarts, only a running plugin can exit, and only a running
// plugin is upgraded (its state stays; its run changes).
//
//	Starting   --Launched-->      Running
//	Starting   --Refused-->       Failed
//	Running    --Exited-->        Down
//	Down       --Attempt-->       Restarting
//	Restarting --Launched-->      Running
//	Restarting --AttemptFailed--> Down
//	Running    --Upgraded-->      Running
func Next(s State, ev Event) (State, bool) {
	switch {
	case s == Starting && ev == Launched, s == Restarting && ev == Launched:
		return Running, true
	case s == Starting && ev == Refused:
		return Failed, true
	case s == Running && ev == Exited:
		return Down, true
	case s == Down && ev == Attempt:
		return Restarting, true
	case s == Restarting && ev == AttemptFailed:
		return Down, true
	case s == Running && ev == Upgraded:
		return Running, true
	}
	return s, false
}

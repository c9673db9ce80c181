package host

import "time"

// PluginPID returns the process id of the named plugin's current run, 0
// when there is none. Tests use it to kill a plugin from outside, as a
// crash or an operator would.
func PluginPID(e *Engine, name string) int {
	ps := e.x.Plugin(name)
	if ps == nil {
		return 0
	}
	if r := ps.Supervised().Run(); r != nil {
		return r.Proc.PID()
	}
	return 0
}

// BatchNumber returns the number observer events give id's batch
// (observe.Event.Batch).
func BatchNumber(id BatchID) uint64 { return id.Number() }

// PauseReapers sets how long the reapers of e's plugins' current runs
// pause after a short run with nobody waiting (progress.Lane.SetReapPause).
func PauseReapers(e *Engine, d time.Duration) {
	for _, ps := range e.x.Plugins() {
		for _, l := range ps.Lanes() {
			l.SetReapPause(d)
		}
	}
}

package stall

import (
	"fmt"
	"time"
)

// Held is what the supervisor sees, at one instant, of the tasks whose
// end (canceled, timed out) was decided while a run of a plugin still
// held slices of them: such a task is not reported ended until no plugin
// can touch its memory, so a plugin that keeps its slices keeps the
// application waiting.
type Held struct {
	Tasks int       // tasks held
	Since time.Time // when the earliest of their ends was decided
}

// HeldVerdict says why a run is killed for holding ended tasks' slices.
type HeldVerdict struct {
	Tasks int
	For   time.Duration // since the earliest end was decided
	Grace time.Duration
}

// String is the reason operators see: in the plugin's status and logs.
func (v *HeldVerdict) String() string {
	return fmt.Sprintf("held slices of %d ended (canceled or timed out) tasks for %s, past the grace period (supervise { end_grace = %q }): killed, so that no buffer of an ended task is touched after its end is reported",
		v.Tasks, v.For.Round(time.Millisecond), v.Grace.String())
}

// Overdue decides whether a run that holds h must be killed: when it has
// held an ended task's slices for grace or longer. The slices of a task
// are asked to stop (an abort, where the plugin can) when its end is
// decided, and their plugin is given grace to give them back; a plugin
// that cannot, or does not, is killed, which frees every buffer it held.
func Overdue(now time.Time, h Held, grace time.Duration) *HeldVerdict {
	if h.Tasks <= 0 || now.Sub(h.Since) < grace {
		return nil
	}
	return &HeldVerdict{Tasks: h.Tasks, For: now.Sub(h.Since), Grace: grace}
}

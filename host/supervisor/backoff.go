package supervisor

import "time"

// Backoff is the restart schedule of a plugin that went down: the first
// attempt waits Min, each failed one doubles the wait, up to Max.
type Backoff struct {
	Min, Max time.Duration
}

// DefaultBackoff is the engine's restart schedule.
var DefaultBackoff = Backoff{Min: 100 * time.Millisecond, Max: 10 * time.Second}

// Schedule is one outage's restart attempts under a Backoff: when the
// next attempt is due. The wait counts from the end of the failed
// attempt, so a slow attempt (a plugin that takes seconds to refuse) does
// not make the next one due at once.
type Schedule struct {
	b    Backoff
	wait time.Duration
	at   time.Time
}

// Start begins the schedule of an outage seen at now: the first attempt
// is due at now+Min. A zero Min or Max takes DefaultBackoff's.
func (b Backoff) Start(now time.Time) Schedule {
	if b.Min <= 0 {
		b.Min = DefaultBackoff.Min
	}
	if b.Max <= 0 {
		b.Max = DefaultBackoff.Max
	}
	b.Max = max(b.Max, b.Min)
	return Schedule{b: b, wait: b.Min, at: now.Add(b.Min)}
}

// Due returns when the next attempt is due.
func (s *Schedule) Due() time.Time { return s.at }

// Wait returns how long the next attempt waits after the previous one
// ended (or the outage began).
func (s *Schedule) Wait() time.Duration { return s.wait }

// Failed records that the attempt ended in failure at now and makes the
// next one due after twice the last wait, at most Max.
func (s *Schedule) Failed(now time.Time) {
	s.wait = min(2*s.wait, s.b.Max)
	s.at = now.Add(s.wait)
}

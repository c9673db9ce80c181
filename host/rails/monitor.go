package rails

import "time"

// MonitorOptions configure rail health. Zero fields take the defaults.
type MonitorOptions struct {
	// Threshold errors within Window pause a rail. Default 3.
	Threshold int
	// Window is the sliding window errors are counted in. Default 10 s.
	Window time.Duration
	// Cooldown is the first pause. Each further trip doubles the previous
	// pause, up to MaxCooldown. Defaults 30 s and 300 s.
	Cooldown    time.Duration
	MaxCooldown time.Duration
	// ResetAfter: a rail that has stayed unpaused this long since it was
	// last restored starts again from Cooldown on its next trip. Default
	// MaxCooldown.
	ResetAfter time.Duration
}

func (o MonitorOptions) withDefaults() MonitorOptions {
	if o.Threshold <= 0 {
		o.Threshold = 3
	}
	if o.Window <= 0 {
		o.Window = 10 * time.Second
	}
	if o.Cooldown <= 0 {
		o.Cooldown = 30 * time.Second
	}
	if o.MaxCooldown <= 0 {
		o.MaxCooldown = 300 * time.Second
	}
	o.MaxCooldown = max(o.MaxCooldown, o.Cooldown)
	if o.ResetAfter <= 0 {
		o.ResetAfter = o.MaxCooldown
	}
	return o
}

// Monitor keeps the health of a fixed set of rails, numbered from 0.
//
// Rules:
//   - Threshold errors on a rail within Window (the newest minus the oldest
//     of the last Threshold errors is less than Window) pause it.
//   - The first pause lasts Cooldown; each later one doubles the previous,
//     capped at MaxCooldown.
//   - A paused rail is restored when its cooldown ends or when ProbeOK
//     reports a successful probe on it, whichever comes first. Errors
//     reported while it is paused are counted in Errors but do not extend
//     the pause: they are the same incident (slices that were in flight).
//   - The doubling resets: once a rail has stayed unpaused for ResetAfter
//     since it was last restored, its next pause is Cooldown again.
//     Successful slices do not restore a paused rail nor reset the
//     doubling; otherwise a flaky rail that fails three slices and carries
//     the fourth would never back off.
type Monitor struct {
	opts   MonitorOptions
	rails  []health
	errsAt []time.Time // Threshold slots per rail: the last errors, a ring
}

type health struct {
	head, n     int // ring of recent error times in errsAt
	errors      uint64
	trips       uint64
	cooldown    time.Duration // the last pause; 0 = never paused
	pausedUntil time.Time
	restoredAt  time.Time // when the last pause ended (or will end)
}

// NewMonitor returns a monitor of n healthy rails.
func NewMonitor(n int, opts MonitorOptions) *Monitor {
	opts = opts.withDefaults()
	return &Monitor{
		opts:   opts,
		rails:  make([]health, n),
		errsAt: make([]time.Time, n*opts.Threshold),
	}
}

// Options returns the options in effect, defaults filled in.
func (m *Monitor) Options() MonitorOptions { return m.opts }

// Len returns the number of rails.
func (m *Monitor) Len() int { return len(m.rails) }

// Fail records an error on rail at now and reports whether this error
// paused it.
func (m *Monitor) Fail(rail int, now time.Time) bool {
	h := &m.rails[rail]
	h.errors++
	if now.Before(h.pausedUntil) {
		return false
	}
	k := m.opts.Threshold
	ring := m.errsAt[rail*k : rail*k+k]
	ring[(h.head+h.n)%k] = now
	if h.n < k {
		h.n++
	} else {
		h.head = (h.head + 1) % k
	}
	if h.n < k || now.Sub(ring[h.head]) >= m.opts.Window {
		return false
	}
	switch {
	case h.cooldown == 0 || now.Sub(h.restoredAt) >= m.opts.ResetAfter:
		h.cooldown = m.opts.Cooldown
	default:
		h.cooldown = min(2*h.cooldown, m.opts.MaxCooldown)
	}
	h.pausedUntil = now.Add(h.cooldown)
	h.restoredAt = h.pausedUntil
	h.head, h.n = 0, 0
	h.trips++
	return true
}

// ProbeOK records a successful probe on rail at now: a paused rail is
// restored at once and its error window is cleared. The doubling is kept
// (see the rules on Monitor).
func (m *Monitor) ProbeOK(rail int, now time.Time) {
	h := &m.rails[rail]
	h.head, h.n = 0, 0
	if now.Before(h.pausedUntil) {
		h.pausedUntil = now
		h.restoredAt = now
	}
}

// Paused reports whether rail is paused at now.
func (m *Monitor) Paused(rail int, now time.Time) bool {
	return now.Before(m.rails[rail].pausedUntil)
}

// PausedUntil returns when rail's current or last pause ends; the zero
// time if it was never paused.
func (m *Monitor) PausedUntil(rail int) time.Time { return m.rails[rail].pausedUntil }

// Cooldown returns the length of rail's current or last pause, 0 if it
// was never paused.
func (m *Monitor) Cooldown(rail int) time.Duration { return m.rails[rail].cooldown }

// Errors returns the number of errors reported on rail.
func (m *Monitor) Errors(rail int) uint64 { return m.rails[rail].errors }

// Trips returns how many times rail was paused.
func (m *Monitor) Trips(rail int) uint64 { return m.rails[rail].trips }

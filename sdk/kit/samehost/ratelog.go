package samehost

import (
	"sync"
	"time"
)

// rateLog lets a repeated warning through at most once per logEvery,
// counting the ones it held back.
type rateLog struct {
	last time.Time
	held uint64
}

// lockedRateLog is a rateLog that goroutines share.
type lockedRateLog struct {
	mu sync.Mutex
	r  rateLog
}

func (l *lockedRateLog) allow(now time.Time) (uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.allow(now)
}

// logEvery is how often a repeated warning is logged at most.
const logEvery = 10 * time.Second

// allow reports whether to log now, and how many were held back since the
// last one logged.
func (r *rateLog) allow(now time.Time) (uint64, bool) {
	if !r.last.IsZero() && now.Sub(r.last) < logEvery {
		r.held++
		return 0, false
	}
	n := r.held
	r.last, r.held = now, 0
	return n, true
}

package path

import (
	"sync"
	"time"

	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Failure is one failed attempt of a task: when, to which segment, over
// what (a transport's name; rail -1 when none was named), its first
// failing slice status and cause; Retried says the engine took it for
// another attempt. The engine's status formats it (host.Failure).
type Failure struct {
	Time      time.Time
	Segment   string
	Op        Op
	Length    uint64
	Transport string
	Rail      int
	Status    ring.Status
	Cause     error
	Retried   bool
}

// recentFailures keeps the last len(ring) failures. It is written on the
// failure path only, never on a successful transfer's.
type recentFailures struct {
	mu   sync.Mutex
	ring [32]Failure
	n    uint64 // failures seen
}

func (r *recentFailures) add(f Failure) {
	r.mu.Lock()
	r.ring[r.n%uint64(len(r.ring))] = f
	r.n++
	r.mu.Unlock()
}

// list returns the kept failures, newest first, and how many there were
// in all.
func (r *recentFailures) list() ([]Failure, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := min(r.n, uint64(len(r.ring)))
	out := make([]Failure, 0, k)
	for j := uint64(1); j <= k; j++ {
		out = append(out, r.ring[(r.n-j)%uint64(len(r.ring))])
	}
	return out, r.n
}

// Failures returns the latest failed attempts, newest first, and how
// many there were in all.
func (e *Executor) Failures() ([]Failure, uint64) { return e.recent.list() }

// noteFailure records attempt failure of task i of b, from the tracker's
// failure hook; retried says whether the engine takes it for another
// attempt.
func (e *Executor) noteFailure(b *progress.Batch, i int, cause error, retried bool) {
	t := b.Task(i)
	req := &e.path.record(b, i).req
	f := Failure{Time: time.Now(), Op: req.Op, Length: t.Length, Transport: e.transportName(t.Transport()),
		Rail: t.FailedRail(), Status: t.SliceStatus(), Cause: cause, Retried: retried}
	if h := e.remote(req.Segment); h != nil {
		f.Segment = h.Name
	}
	e.recent.add(f)
}

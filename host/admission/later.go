package admission

import (
	"sync"
	"time"

	"github.com/ferrydev/ferry/host/progress"
)

// Later, from an application's Admitter, means what it means from the
// qos queue: the request is held back, PENDING, and goes on when
// admission lets it. The queue knows when a budget frees; an Admitter
// says nothing of when, so the Asker asks it again, backing off from
// laterFirst to laterMax, until it says Now (the task goes on), Reject
// (it ends INVALID), or the task ends first (canceled, or past its
// deadline: TIMEOUT).

// The pauses between asks about a held request.
const (
	laterFirst = time.Millisecond
	laterMax   = 100 * time.Millisecond
)

// AskPort is what the Asker does with the tasks it holds.
type AskPort interface {
	// Go takes held task h on: the Admitter said Now. Its batch is
	// pinned while it runs.
	Go(h Held)
	// Refuse ends held task h: the Admitter said Reject (d says why).
	Refuse(h Held, d Decision)
	// Abandon ends held task h: the engine closed.
	Abandon(h Held)
}

// Asker holds the requests an Admitter said Later of and asks it again
// until it says otherwise. Safe for concurrent use.
type Asker struct {
	a       Admitter
	tracker *progress.Tracker
	port    AskPort
	quit    <-chan struct{}

	mu   sync.Mutex
	held []later
	wake chan struct{}
}

type later struct {
	h       Held
	unblame func() // takes back the reason a TIMEOUT while held would give
	r       Request
	at      int64 // when to ask next, unix ns
	pause   time.Duration
}

// NewAsker returns an Asker of a; Run is its goroutine.
func NewAsker(a Admitter, tr *progress.Tracker, port AskPort, quit <-chan struct{}) *Asker {
	return &Asker{a: a, tracker: tr, port: port, quit: quit, wake: make(chan struct{}, 1)}
}

// Hold holds task h, of request r, which the Admitter said Later of at
// now; unblame is called when it goes on (progress.Batch.Blame).
func (k *Asker) Hold(h Held, r Request, now int64, unblame func()) {
	k.mu.Lock()
	k.held = append(k.held, later{h: h, unblame: unblame, r: r, at: now + int64(laterFirst), pause: laterFirst})
	k.mu.Unlock()
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// Held returns how many requests are held now.
func (k *Asker) Held() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.held)
}

// Forget drops the held tasks of b, which is being freed.
func (k *Asker) Forget(b *progress.Batch) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.held = deleteFunc(k.held, func(l later) bool { return l.h.B == b })
}

func deleteFunc(s []later, del func(later) bool) []later {
	out := s[:0]
	for _, l := range s {
		if !del(l) {
			out = append(out, l)
		}
	}
	clear(s[len(out):])
	return out
}

// Run asks about the held requests as their pauses end, until quit; then
// it abandons those still held.
func (k *Asker) Run() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var due []later
	for {
		select {
		case <-k.quit:
			k.mu.Lock()
			held := k.held
			k.held = nil
			k.mu.Unlock()
			for _, l := range held {
				if l.h.B.ID() == l.h.ID {
					k.port.Abandon(l.h)
				}
			}
			return
		case <-k.wake:
		case <-timer.C:
		}
		now := progress.Now()
		due = due[:0]
		next := int64(0)
		k.mu.Lock()
		k.held = deleteFunc(k.held, func(l later) bool {
			switch {
			case l.h.B.ID() != l.h.ID || l.h.B.Stopping(int(l.h.I), now):
				return true // its batch was freed, or it ended (canceled, past its deadline)
			case l.at <= now:
				due = append(due, l)
				return true
			}
			if next == 0 || l.at < next {
				next = l.at
			}
			return false
		})
		k.mu.Unlock()
		// The Admitter is asked with no lock held: it is the
		// application's, and may take its own.
		var again []later
		for _, l := range due {
			switch d := k.a.Admit(l.r, now); d.Verdict {
			case Later:
				l.pause = min(2*l.pause, laterMax)
				l.at = now + int64(l.pause)
				again = append(again, l)
			case Now:
				if k.tracker.PinBatch(l.h.B, l.h.ID) {
					l.unblame()
					k.port.Go(l.h)
					k.tracker.Unpin(l.h.B)
				}
			default:
				k.port.Refuse(l.h, d)
			}
		}
		if len(again) > 0 {
			k.mu.Lock()
			k.held = append(k.held, again...)
			k.mu.Unlock()
			for _, l := range again {
				if next == 0 || l.at < next {
					next = l.at
				}
			}
		}
		if next != 0 {
			timer.Reset(time.Duration(max(next-progress.Now(), 0)))
		}
	}
}

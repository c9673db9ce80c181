package credit

import (
	"fmt"
	"time"
)

// MaxSenders bounds how many senders a Grantor remembers; a new one past
// it forgets the one heard from longest ago (which starts again from the
// initial window if it returns).
const MaxSenders = 4096

// Sender names one incarnation of a sending engine.
type Sender struct {
	Name        string
	Incarnation uint64
}

// Grantor sizes the grants of one receiver of incarnation epoch. It is
// not safe for concurrent use: its owner serialises Grant.
type Grantor struct {
	lim    Limits
	target time.Duration
	epoch  uint64
	s      map[Sender]*window
}

// window is what a Grantor keeps of one sender.
type window struct {
	seq   uint64  // the last request answered
	last  int64   // when (unix ns)
	bytes uint64  // the window granted
	rate  float64 // drained bytes per second, smoothed; 0 before two requests
}

// NewGrantor returns the grantor of a receiver of incarnation epoch: it
// grants l's initial credit to a new sender and keeps each sender's
// backlog near target at its measured drain rate.
func NewGrantor(l Limits, target time.Duration, epoch uint64) *Grantor {
	return &Grantor{lim: l, target: target, epoch: epoch, s: make(map[Sender]*window)}
}

// MinWindow is the smallest window a Grantor grants: a receiver that
// drains slowly still lets every sender make progress.
const MinWindow = 64 << 10

// step is the additive increase: a sixteenth of the initial window, at
// least MinWindow.
func (g *Grantor) step() uint64 { return max(g.lim.InitialBytes/16, MinWindow) }

// Grant answers sender s's request r at now (unix ns) by AIMD on the
// drain rate measured from the sender's reports:
//
//   - the rate is r.Drained over the time since the sender's previous
//     request, smoothed (a quarter of each new sample);
//   - when what the sender has in flight would take longer than the
//     target delay to drain at that rate (r.InUse > rate x target), the
//     receiver is not keeping up: the window halves (multiplicative
//     decrease), down to MinWindow;
//   - else, when the sender waited for credit (r.Limited), the window is
//     what holds it back: it grows by one step (additive increase), up to
//     MaxBytes;
//   - else it stays.
//
// What is in flight includes what is on the wire, so the target must
// exceed the path's round trip: a longer path counts as backlog and keeps
// the window small (config's target_delay, 200 ms by default, covers a
// data centre and a region). The requests granted follow the bytes in the
// initial proportion. A request numbered at or below the sender's last
// one is refused (ErrReplayed).
func (g *Grantor) Grant(s Sender, r Report, now int64) (Grant, error) {
	w := g.s[s]
	if w == nil {
		g.forgetOldest()
		w = &window{bytes: g.lim.InitialBytes}
		g.s[s] = w
	} else if r.Seq <= w.seq {
		return Grant{}, fmt.Errorf("%w: request %d from %q (incarnation %#x); the last answered is %d", ErrReplayed, r.Seq, s.Name, s.Incarnation, w.seq)
	}
	if w.last != 0 && now > w.last {
		sample := float64(r.Drained) / (float64(now-w.last) / 1e9)
		if w.rate == 0 {
			w.rate = sample
		} else {
			w.rate += (sample - w.rate) / 4
		}
	}
	switch backlog := w.rate * g.target.Seconds(); {
	case w.rate > 0 && float64(r.InUse) > backlog:
		w.bytes = max(w.bytes/2, MinWindow)
	case r.Limited:
		w.bytes = min(w.bytes+g.step(), g.lim.MaxBytes)
	}
	w.seq, w.last = r.Seq, now
	return Grant{Epoch: g.epoch, Seq: r.Seq, Bytes: w.bytes, Requests: g.requests(w.bytes)}, nil
}

// requests is the request count that goes with a window of b bytes: the
// initial proportion, at least 1, at most MaxRequests.
func (g *Grantor) requests(b uint64) uint32 {
	n := (b*uint64(g.lim.InitialRequests) + g.lim.InitialBytes - 1) / g.lim.InitialBytes
	return uint32(min(max(n, 1), uint64(g.lim.MaxRequests)))
}

// forgetOldest makes room for a new sender when MaxSenders are known.
func (g *Grantor) forgetOldest() {
	if len(g.s) < MaxSenders {
		return
	}
	var oldest Sender
	at := int64(-1)
	for s, w := range g.s {
		if at < 0 || w.last < at {
			oldest, at = s, w.last
		}
	}
	delete(g.s, oldest)
}

// Senders returns how many senders g remembers.
func (g *Grantor) Senders() int { return len(g.s) }

package credit

import (
	"errors"
	"fmt"
	"sync"
)

// Limits bound credit: what a sender starts with, and the most a grant
// may give.
type Limits struct {
	InitialBytes, MaxBytes       uint64
	InitialRequests, MaxRequests uint32
}

// Check says why l cannot be used, or nil.
func (l Limits) Check() error {
	switch {
	case l.InitialBytes == 0 || l.InitialRequests == 0:
		return errors.New("credit: the initial bytes and requests must be above 0")
	case l.InitialBytes > l.MaxBytes || l.InitialRequests > l.MaxRequests:
		return fmt.Errorf("credit: the initial credit (%d bytes, %d requests) is above the maximum (%d bytes, %d requests)",
			l.InitialBytes, l.InitialRequests, l.MaxBytes, l.MaxRequests)
	}
	return nil
}

// Grant is what a receiver gives one sender: the bytes and requests it
// may have in flight, from now on (not added to what it had).
type Grant struct {
	// Epoch is the receiver's incarnation: a grant from an earlier life
	// of the receiver means nothing now.
	Epoch uint64
	// Seq is the sender's request the grant answers (Report.Seq).
	Seq      uint64
	Bytes    uint64
	Requests uint32
}

// Report is what a sender tells a receiver when it asks for a grant.
type Report struct {
	// Seq numbers the sender's requests to this receiver, from 1,
	// strictly increasing within one incarnation of each side.
	Seq uint64
	// Drained is how many bytes came back (completed) since the previous
	// request; InUse is how many are in flight now.
	Drained, InUse uint64
	// Limited: a slice waited for credit since the previous request.
	Limited bool
}

// Why a sender refuses a grant.
var (
	ErrStaleEpoch = errors.New("the grant is from another incarnation of the receiver")
	ErrReplayed   = errors.New("the grant answers no outstanding request (replayed or out of order)")
	ErrTooLarge   = errors.New("the grant is above the configured maximum")
)

// AccountStats counts what an account did.
type AccountStats struct {
	Window   uint64 // bytes granted now
	Requests uint32 // requests granted now
	InUse    uint64 // bytes taken, not given back
	InFlight uint32 // requests taken, not given back
	Grants   uint64 // grants accepted
	Refused  uint64 // grants refused (Accept's errors)
	Waits    uint64 // Take calls that found no credit
	Resets   uint64 // Reset calls: the receiver's loss
}

// Account is a sender's credit at one receiver. It is safe for
// concurrent use.
type Account struct {
	mu     sync.Mutex
	lim    Limits
	epoch  uint64
	gen    uint64 // bumped by Reset: what was taken before gives nothing back
	seq    uint64 // the last request made (Request)
	acked  uint64 // the last request whose grant was accepted
	window uint64
	wreq   uint32
	used   uint64
	ureq   uint32
	// usedHigh and ureqHigh are the part of used and ureq the high class
	// holds (Take).
	usedHigh uint64
	ureqHigh uint32
	// drained is what came back since the last Request; limited says a
	// Take failed since then.
	drained uint64
	limited bool
	wake    chan struct{} // closed when credit comes back; nil while nobody waits
	st      AccountStats
}

// NewAccount returns an account at a receiver of incarnation epoch, with
// the initial credit of l (which Limits.Check accepts).
func NewAccount(l Limits, epoch uint64) *Account {
	a := &Account{lim: l}
	a.reset(epoch)
	return a
}

// reset starts the account again at a receiver of incarnation epoch. The
// request numbers go on: a receiver that kept its incarnation (a passing
// outage of its control service) still refuses numbers it answered.
func (a *Account) reset(epoch uint64) {
	a.epoch = epoch
	a.gen++
	a.window, a.wreq = a.lim.InitialBytes, a.lim.InitialRequests
	a.used, a.ureq, a.drained, a.limited = 0, 0, 0, false
	a.usedHigh, a.ureqHigh = 0, 0
	a.signal()
}

// signal wakes the waiters; a.mu is held.
func (a *Account) signal() {
	if a.wake != nil {
		close(a.wake)
		a.wake = nil
	}
}

// Epoch returns the receiver incarnation the account is at.
func (a *Account) Epoch() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.epoch
}

// ReserveShare sizes the high class's reserve: bulk slices (TakeBulk)
// never take the last 1/ReserveShare of a window's bytes, nor of its
// requests (at least one of them, when the window has two or more).
const ReserveShare = 8

// reserve is the part of a window of window bytes and wreq requests that
// bulk slices leave to the high class.
func reserve(window uint64, wreq uint32) (uint64, uint32) {
	r := wreq / ReserveShare
	if r == 0 && wreq >= 2 {
		r = 1
	}
	return window / ReserveShare, r
}

// The ticket of a slice says which part of the window it took: the low
// bit is set for the high class, the rest is the account's generation.
const ticketHigh = 1

// Take takes credit for one slice of the high class, n bytes, and
// reports whether there was enough, with the ticket to give it back
// under. A high slice may use the whole window and always finds the
// reserve that bulk slices leave (see TakeBulk); a slice larger than
// what is free goes when no other high slice is in flight, so that a
// small grant, or a bulk slice larger than the window, slows the high
// class down rather than stopping it. What a receiver holds is then at
// most the window plus one bulk and one high slice over it.
func (a *Account) Take(n uint64) (ticket uint64, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.fits(n, 1, true) && !(a.ureqHigh == 0 && a.window > 0 && a.wreq > 0) {
		a.limited = true
		a.st.Waits++
		return a.ticket(true), false
	}
	return a.add(n, 1, true), true
}

// TakeBulk takes credit for one slice of n bytes of a class other than
// high (normal, low): like Take, but what bulk slices hold stays within
// the window less the high class's reserve (ReserveShare), so that a
// high slice never waits for credit bulk slices hold. A slice larger than that goes when nothing at
// all is in flight.
func (a *Account) TakeBulk(n uint64) (ticket uint64, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.fits(n, 1, false) && !(a.ureq == 0 && a.window > 0 && a.wreq > 0) {
		a.limited = true
		a.st.Waits++
		return a.ticket(false), false
	}
	return a.add(n, 1, false), true
}

// TakeRun takes credit for slices slices of n bytes in all, at once: all
// of them or none, under the rules of Take (high) or TakeBulk (else),
// and reports whether there was enough, with the ticket to give it back
// under. It is for a run of small requests that a submitter puts on a
// lane together; where it finds too little, its caller takes credit a
// slice at a time (and waits for it), so a run that does not fit is not
// a wait and counts as none. A run is never one oversized slice: that
// goes alone (Take, TakeBulk).
func (a *Account) TakeRun(n uint64, slices uint32, high bool) (ticket uint64, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.fits(n, slices, high) {
		return a.ticket(high), false
	}
	return a.add(n, slices, high), true
}

// fits reports whether slices slices of n bytes in all fit the window
// now: a high one anywhere in it, or in the reserve bulk slices leave
// it; any other within the window and within the bulk class's own part
// of it (the window less the reserve). a.mu is held.
func (a *Account) fits(n uint64, slices uint32, high bool) bool {
	rb, rr := reserve(a.window, a.wreq)
	inWindow := a.used+n <= a.window && a.ureq+slices <= a.wreq
	if high {
		return inWindow || a.usedHigh+n <= rb && a.ureqHigh+slices <= rr
	}
	return inWindow && a.used-a.usedHigh+n <= a.window-rb && a.ureq-a.ureqHigh+slices <= a.wreq-rr
}

// add takes slices slices of n bytes in all, of the high class or not,
// and returns their ticket. a.mu is held.
func (a *Account) add(n uint64, slices uint32, high bool) uint64 {
	a.used += n
	a.ureq += slices
	if high {
		a.usedHigh += n
		a.ureqHigh += slices
	}
	return a.ticket(high)
}

// ticket is the ticket of a slice of the high class or not, taken now.
// a.mu is held.
func (a *Account) ticket(high bool) uint64 {
	if high {
		return a.gen<<1 | ticketHigh
	}
	return a.gen << 1
}

// Untake gives back credit for slices slices of n bytes in all that were
// taken under ticket (TakeRun) and never used: unlike GiveBack it counts
// nothing as drained, since nothing reached the receiver.
func (a *Account) Untake(ticket, n uint64, slices uint32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.giveBack(ticket, n, slices)
}

// Give gives back credit for one slice of n bytes taken under ticket;
// what was taken before a Reset was returned by it already.
func (a *Account) Give(ticket, n uint64) { a.GiveBack(ticket, n, 1) }

// GiveBack gives back credit for slices slices of n bytes in all, taken
// under ticket: what a task still held when it ended without their
// completions.
func (a *Account) GiveBack(ticket, n uint64, slices uint32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.drained += a.giveBack(ticket, n, slices)
}

// giveBack returns credit taken under ticket, and what it returned; a.mu
// is held.
func (a *Account) giveBack(ticket, n uint64, slices uint32) uint64 {
	if ticket>>1 != a.gen || slices == 0 {
		return 0
	}
	n = min(n, a.used)
	a.used -= n
	a.ureq -= min(slices, a.ureq)
	if ticket&ticketHigh != 0 {
		a.usedHigh -= min(n, a.usedHigh)
		a.ureqHigh -= min(slices, a.ureqHigh)
	}
	a.signal()
	return n
}

// Wait returns a channel closed when credit comes back (a Give, a
// grant, a Reset). Take again after it closes.
func (a *Account) Wait() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.wake == nil {
		a.wake = make(chan struct{})
	}
	return a.wake
}

// Request numbers the next grant request and returns its report; the
// drain count starts again.
func (a *Account) Request() Report {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seq++
	r := Report{Seq: a.seq, Drained: a.drained, InUse: a.used, Limited: a.limited}
	a.drained, a.limited = 0, false
	return r
}

// Accept takes grant g as the account's window, or refuses it: from
// another epoch (ErrStaleEpoch: the caller resets the account when the
// receiver's incarnation changed), answering no outstanding request
// (ErrReplayed), or above the limits (ErrTooLarge).
func (a *Account) Accept(g Grant) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var err error
	switch {
	case g.Epoch != a.epoch:
		err = fmt.Errorf("%w: epoch %#x, the account's is %#x", ErrStaleEpoch, g.Epoch, a.epoch)
	case g.Seq != a.seq || g.Seq <= a.acked:
		err = fmt.Errorf("%w: it answers request %d; the last sent is %d, the last answered %d", ErrReplayed, g.Seq, a.seq, a.acked)
	case g.Bytes > a.lim.MaxBytes || g.Requests > a.lim.MaxRequests:
		err = fmt.Errorf("%w: %d bytes and %d requests granted, max_bytes is %d and max_requests %d", ErrTooLarge, g.Bytes, g.Requests, a.lim.MaxBytes, a.lim.MaxRequests)
	}
	if err != nil {
		a.st.Refused++
		return err
	}
	a.acked = g.Seq
	a.window, a.wreq = g.Bytes, g.Requests
	a.st.Grants++
	a.signal()
	return nil
}

// Reset returns every credit: the receiver is gone (its control service
// does not answer) or now has incarnation epoch. The window is the
// initial one again, and slices taken before give nothing back.
func (a *Account) Reset(epoch uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.st.Resets++
	a.reset(epoch)
}

// Stats returns the account's state and counters.
func (a *Account) Stats() AccountStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.st
	s.Window, s.Requests, s.InUse, s.InFlight = a.window, a.wreq, a.used, a.ureq
	return s
}

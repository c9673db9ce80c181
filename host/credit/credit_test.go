package credit_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host/credit"
)

var lim = credit.Limits{InitialBytes: 1 << 20, MaxBytes: 8 << 20, InitialRequests: 4, MaxRequests: 32}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// mustTake takes n through take (an Account's Take or TakeBulk) and
// fails the test with msg if it would wait.
func mustTake(t *testing.T, take func(uint64) (uint64, bool), n uint64, msg string) uint64 {
	t.Helper()
	tk, ok := take(n)
	if !ok {
		t.Fatal(msg)
	}
	return tk
}

// mustWait fails the test with msg if taking n through take (an
// Account's Take or TakeBulk) passes instead of waiting.
func mustWait(t *testing.T, take func(uint64) (uint64, bool), n uint64, msg string) {
	t.Helper()
	if _, ok := take(n); ok {
		t.Fatal(msg)
	}
}

func TestAccountTakeGive(t *testing.T) {
	a := credit.NewAccount(lim, 7)
	var eps []uint64
	for range 4 {
		eps = append(eps, mustTake(t, a.Take, 256<<10, "Take found no credit in the initial window"))
	}
	mustWait(t, a.Take, 1, "a fifth Take passed a window of 1 MiB and 4 requests")
	w := a.Wait()
	if closed(w) {
		t.Fatal("Wait closed with no credit back")
	}
	a.Give(eps[0], 256<<10)
	if !closed(w) {
		t.Fatal("Give did not wake the waiter")
	}
	if _, ok := a.Take(256 << 10); !ok {
		t.Fatal("Take after a Give found no credit")
	}
	s := a.Stats()
	if s.InUse != 1<<20 || s.InFlight != 4 || s.Waits != 1 {
		t.Errorf("stats %+v, want 1 MiB and 4 requests in use, 1 wait", s)
	}
	// The requests bound as well as the bytes: a small slice waits.
	if _, ok := a.Take(1); ok {
		t.Error("Take passed with every request in use")
	}
}

// A slice larger than the whole window goes when nothing is in flight:
// a small grant slows a sender, it never stops it.
func TestAccountOversizeSlice(t *testing.T) {
	a := credit.NewAccount(lim, 1)
	tk := mustTake(t, a.Take, 4<<20, "an oversize slice with nothing in flight waited")
	mustWait(t, a.Take, 1, "a second slice passed beside an oversize one")
	a.Give(tk, 4<<20)
	if s := a.Stats(); s.InUse != 0 || s.InFlight != 0 {
		t.Errorf("after Give: %+v, want nothing in use", s)
	}
}

func TestAccountAccept(t *testing.T) {
	a := credit.NewAccount(lim, 9)
	r := a.Request()
	if r.Seq != 1 {
		t.Fatalf("first request seq %d, want 1", r.Seq)
	}
	for _, tc := range []struct {
		name string
		g    credit.Grant
		want error
	}{
		{"other epoch", credit.Grant{Epoch: 8, Seq: 1, Bytes: 1 << 20, Requests: 4}, credit.ErrStaleEpoch},
		{"unrequested", credit.Grant{Epoch: 9, Seq: 2, Bytes: 1 << 20, Requests: 4}, credit.ErrReplayed},
		{"too many bytes", credit.Grant{Epoch: 9, Seq: 1, Bytes: 8<<20 + 1, Requests: 4}, credit.ErrTooLarge},
		{"too many requests", credit.Grant{Epoch: 9, Seq: 1, Bytes: 1 << 20, Requests: 33}, credit.ErrTooLarge},
	} {
		if err := a.Accept(tc.g); !errors.Is(err, tc.want) {
			t.Errorf("%s: Accept = %v, want %v", tc.name, err, tc.want)
		}
	}
	good := credit.Grant{Epoch: 9, Seq: 1, Bytes: 2 << 20, Requests: 8}
	if err := a.Accept(good); err != nil {
		t.Fatal(err)
	}
	if err := a.Accept(good); !errors.Is(err, credit.ErrReplayed) {
		t.Errorf("the same grant again: %v, want ErrReplayed", err)
	}
	// An old grant replayed after a newer request is refused too.
	a.Request()
	if err := a.Accept(good); !errors.Is(err, credit.ErrReplayed) {
		t.Errorf("an old grant after a new request: %v, want ErrReplayed", err)
	}
	s := a.Stats()
	if s.Window != 2<<20 || s.Requests != 8 || s.Grants != 1 || s.Refused != 6 {
		t.Errorf("stats %+v, want a 2 MiB, 8-request window, 1 grant, 6 refused", s)
	}
}

// The receiver's loss returns every credit: slices taken before give
// nothing back, and the window is the initial one.
func TestAccountReset(t *testing.T) {
	a := credit.NewAccount(lim, 1)
	a.Request()
	if err := a.Accept(credit.Grant{Epoch: 1, Seq: 1, Bytes: 64 << 10, Requests: 1}); err != nil {
		t.Fatal(err)
	}
	old, _ := a.Take(64 << 10)
	w := a.Wait()
	a.Reset(2)
	if !closed(w) {
		t.Fatal("Reset did not wake the waiters")
	}
	if s := a.Stats(); s.InUse != 0 || s.Window != lim.InitialBytes || s.Resets != 1 {
		t.Fatalf("after Reset: %+v, want nothing in use, the initial window", s)
	}
	ep, _ := a.Take(512 << 10)
	a.Give(old, 64<<10) // the old slice completes late
	if s := a.Stats(); s.InUse != 512<<10 || s.InFlight != 1 {
		t.Errorf("a give of the old epoch counted: %+v", s)
	}
	a.Give(ep, 512<<10)
	if r := a.Request(); r.Seq != 2 || r.Drained != 512<<10 || r.InUse != 0 {
		t.Errorf("report after Reset %+v, want seq 2 (the numbers go on), 512 KiB drained", r)
	}
	// A Reset at the same epoch (the control service went away) returns
	// the credit as well.
	tk, _ := a.Take(64 << 10)
	a.Reset(2)
	a.Give(tk, 64<<10)
	if s := a.Stats(); s.InUse != 0 || s.InFlight != 0 {
		t.Errorf("after a Reset at the same epoch: %+v, want nothing in use", s)
	}
}

// GiveBack returns what a task held when it ended without completions.
func TestAccountGiveBack(t *testing.T) {
	a := credit.NewAccount(lim, 1)
	var tk uint64
	for range 3 {
		tk, _ = a.Take(100)
	}
	a.GiveBack(tk, 300, 3)
	if s := a.Stats(); s.InUse != 0 || s.InFlight != 0 {
		t.Errorf("after GiveBack: %+v, want nothing in use", s)
	}
	a.GiveBack(tk, 300, 3) // more than is held: nothing goes below zero
	if s := a.Stats(); s.InUse != 0 || s.InFlight != 0 {
		t.Errorf("after a second GiveBack: %+v", s)
	}
}

func TestGrantorReplay(t *testing.T) {
	g := credit.NewGrantor(lim, 20*time.Millisecond, 5)
	s := credit.Sender{Name: "a", Incarnation: 1}
	gr, err := g.Grant(s, credit.Report{Seq: 1}, 1)
	if err != nil || gr.Epoch != 5 || gr.Seq != 1 || gr.Bytes != lim.InitialBytes || gr.Requests != lim.InitialRequests {
		t.Fatalf("first grant %+v, %v; want the initial credit at epoch 5", gr, err)
	}
	for _, seq := range []uint64{1, 0} {
		if _, err := g.Grant(s, credit.Report{Seq: seq}, 2); !errors.Is(err, credit.ErrReplayed) {
			t.Errorf("request %d again: %v, want ErrReplayed", seq, err)
		}
	}
	// Another incarnation of the sender starts again.
	if _, err := g.Grant(credit.Sender{Name: "a", Incarnation: 2}, credit.Report{Seq: 1}, 3); err != nil {
		t.Errorf("a new incarnation's first request: %v", err)
	}
}

// sim runs a sender that always has more to send against a receiver that
// drains rate bytes per second, asking for a grant every interval on a
// simulated clock, and returns the windows granted.
func sim(t *testing.T, g *credit.Grantor, rate float64, steps int) []uint64 {
	t.Helper()
	const interval = 50 * time.Millisecond
	a := credit.NewAccount(lim, 5)
	s := credit.Sender{Name: "a", Incarnation: 1}
	var eps []uint64 // one per 64 KiB slice in flight, oldest first
	var windows []uint64
	now := int64(time.Second)
	carry := 0.0
	for range steps {
		for { // fill the window
			ep, ok := a.Take(64 << 10)
			if !ok {
				break
			}
			eps = append(eps, ep)
		}
		now += int64(interval)
		carry += rate * interval.Seconds()
		for carry >= 64<<10 && len(eps) > 0 { // the receiver drains
			a.Give(eps[0], 64<<10)
			eps = eps[1:]
			carry -= 64 << 10
		}
		if len(eps) == 0 {
			carry = 0
		}
		gr, err := g.Grant(s, a.Request(), now)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Accept(gr); err != nil {
			t.Fatal(err)
		}
		windows = append(windows, gr.Bytes)
	}
	return windows
}

// A receiver that drains fast: the window grows by one step per grant
// while the sender waits for credit, up to max_bytes.
func TestGrantorAdditiveIncrease(t *testing.T) {
	g := credit.NewGrantor(lim, 20*time.Millisecond, 5)
	w := sim(t, g, 10e9, 200)
	for i := 1; i < len(w); i++ {
		if w[i] < w[i-1] || w[i]-w[i-1] > max(lim.InitialBytes/16, credit.MinWindow) {
			t.Fatalf("grant %d: window %d after %d: not an additive step", i, w[i], w[i-1])
		}
	}
	if last := w[len(w)-1]; last != lim.MaxBytes {
		t.Errorf("window after 200 grants at 10 GB/s: %d, want max_bytes %d", last, lim.MaxBytes)
	}
}

// A receiver that drains 2.5 MB/s (20 Mbit/s): the window halves while
// the backlog is longer than the target and settles near rate x target,
// far below the initial window.
func TestGrantorMultiplicativeDecrease(t *testing.T) {
	const rate = 2.5e6
	g := credit.NewGrantor(lim, 20*time.Millisecond, 5)
	w := sim(t, g, rate, 400)
	halved := false
	for i := 1; i < len(w); i++ {
		if w[i] < w[i-1] {
			halved = true
			if w[i] != max(w[i-1]/2, credit.MinWindow) {
				t.Fatalf("grant %d: window %d after %d: a decrease is a halving", i, w[i], w[i-1])
			}
		}
	}
	if !halved {
		t.Fatal("the window never decreased for a slow receiver")
	}
	// In the last half the window saws between MinWindow and twice
	// what drains in one grant interval and the target delay, plus a
	// step: far below the initial window.
	bound := uint64(2*rate*(0.050+0.020)) + max(lim.InitialBytes/16, credit.MinWindow)
	if bound >= lim.InitialBytes/2 {
		t.Fatalf("bound %d says nothing", bound)
	}
	for i := len(w) / 2; i < len(w); i++ {
		if w[i] > bound {
			t.Errorf("grant %d: window %d, above %d", i, w[i], bound)
		}
	}
}

func TestGrantorForgetsOldest(t *testing.T) {
	g := credit.NewGrantor(lim, 20*time.Millisecond, 5)
	for i := range credit.MaxSenders + 1 {
		if _, err := g.Grant(credit.Sender{Name: "s", Incarnation: uint64(i)}, credit.Report{Seq: 1}, int64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if n := g.Senders(); n != credit.MaxSenders {
		t.Errorf("%d senders remembered, want %d", n, credit.MaxSenders)
	}
	// The first (oldest) was forgotten: its request 1 is new again.
	if _, err := g.Grant(credit.Sender{Name: "s", Incarnation: 0}, credit.Report{Seq: 1}, 1<<40); err != nil {
		t.Errorf("the forgotten sender's request: %v", err)
	}
}

func TestLimitsCheck(t *testing.T) {
	if err := lim.Check(); err != nil {
		t.Error(err)
	}
	for _, l := range []credit.Limits{
		{InitialBytes: 0, MaxBytes: 1, InitialRequests: 1, MaxRequests: 1},
		{InitialBytes: 2, MaxBytes: 1, InitialRequests: 1, MaxRequests: 1},
		{InitialBytes: 1, MaxBytes: 1, InitialRequests: 2, MaxRequests: 1},
	} {
		if l.Check() == nil {
			t.Errorf("Check(%+v) = nil, want an error", l)
		}
	}
}

// Bulk slices leave the high class its reserve of the window: a HIGH
// slice never waits for credit that LOW slices hold (issue 13's
// isolation over tcp).
func TestAccountHighReserve(t *testing.T) {
	// lim: a window of 1 MiB and 4 requests; the reserve is 128 KiB and
	// one request.
	a := credit.NewAccount(lim, 1)
	var bulk []uint64
	for range 3 {
		bulk = append(bulk, mustTake(t, a.TakeBulk, 256<<10, "a bulk slice found no credit in its part of the initial window"))
	}
	mustWait(t, a.TakeBulk, 4<<10, "a bulk slice took the high class's reserved request")
	hi := mustTake(t, a.Take, 4<<10, "a high slice waited while bulk slices held all they may")
	if s := a.Stats(); s.InUse != 3*256<<10+4<<10 || s.InFlight != 4 || s.Waits != 1 {
		t.Errorf("stats %+v, want 772 KiB and 4 requests in use, 1 wait", s)
	}
	// The high slice's credit comes back to the high class: another
	// fits; the bulk slices' to the bulk class.
	a.Give(hi, 4<<10)
	if _, ok := a.Take(4 << 10); !ok {
		t.Error("a high slice waited after the last one's credit came back")
	}
	a.Give(bulk[0], 256<<10)
	if _, ok := a.TakeBulk(256 << 10); !ok {
		t.Error("a bulk slice waited after a bulk slice's credit came back")
	}
}

// The reserve holds in bytes as well as requests, and the high class may
// use the whole window.
func TestAccountHighReserveBytes(t *testing.T) {
	a := credit.NewAccount(lim, 1)
	if _, ok := a.TakeBulk(512 << 10); !ok {
		t.Fatal("a bulk slice of half the window waited")
	}
	mustWait(t, a.TakeBulk, 400<<10, "bulk slices took 912 KiB of a 1 MiB window: past its 896 KiB")
	if _, ok := a.Take(400 << 10); !ok {
		t.Fatal("a high slice of 400 KiB waited with 512 KiB of 1 MiB in use")
	}
	mustWait(t, a.Take, 200<<10, "a high slice passed the whole window")
}

// A bulk slice larger than the window goes when nothing is in flight, as
// before; the high class still finds its reserve beside it, one slice at
// a time beyond it.
func TestAccountHighReserveBesideOversize(t *testing.T) {
	a := credit.NewAccount(lim, 1)
	big := mustTake(t, a.TakeBulk, 4<<20, "an oversize bulk slice with nothing in flight waited")
	mustWait(t, a.TakeBulk, 1, "a second bulk slice passed beside an oversize one")
	hi := mustTake(t, a.Take, 4<<10, "a high slice waited beside an oversize bulk slice")
	mustWait(t, a.Take, 4<<10, "a second high slice passed a reserve of one request with the window overdrawn")
	// A high slice larger than the reserve goes when no other high one
	// is in flight.
	a.Give(hi, 4<<10)
	if _, ok := a.Take(2 << 20); !ok {
		t.Fatal("an oversize high slice waited with no high slice in flight")
	}
	a.Give(big, 4<<20)
	if s := a.Stats(); s.InUse != 2<<20 || s.InFlight != 1 {
		t.Errorf("stats %+v, want the high slice's 2 MiB and 1 request in use", s)
	}
	// A Reset returns the high class's credit too: tickets from before
	// give nothing back.
	a.Reset(2)
	if _, ok := a.Take(1 << 20); !ok {
		t.Fatal("a high slice of the whole window waited after Reset")
	}
	a.Give(hi, 4<<10)
	if s := a.Stats(); s.InUse != 1<<20 || s.InFlight != 1 {
		t.Errorf("after Reset and a stale Give: %+v, want 1 MiB and 1 request in use", s)
	}
}

// A window of one request keeps no request for the high class (it could
// not be shared); its bytes are reserved all the same.
func TestAccountReserveOneRequest(t *testing.T) {
	one := credit.Limits{InitialBytes: 1 << 20, MaxBytes: 1 << 20, InitialRequests: 1, MaxRequests: 1}
	a := credit.NewAccount(one, 1)
	if _, ok := a.TakeBulk(4 << 10); !ok {
		t.Fatal("a bulk slice waited in a window of one request")
	}
	if _, ok := a.Take(4 << 10); !ok {
		t.Fatal("a high slice waited for a window of one request that bulk holds")
	}
}

// TakeRun takes a run's credit all at once or not at all, under the
// class rules of Take and TakeBulk; a run that does not fit is no wait;
// Untake returns credit without counting it drained.
func TestAccountTakeRun(t *testing.T) {
	a := credit.NewAccount(lim, 1) // 1 MiB, 4 requests; bulk leaves 128 KiB and 1 request
	if _, ok := a.TakeRun(4<<10, 4, false); ok {
		t.Fatal("a bulk run of 4 took the high class's reserved request")
	}
	if _, ok := a.TakeRun(1<<20, 2, false); ok {
		t.Fatal("a bulk run took the high class's reserved bytes")
	}
	if s := a.Stats(); s.InUse != 0 || s.InFlight != 0 || s.Waits != 0 {
		t.Fatalf("after runs that did not fit: %+v, want nothing taken and no wait", s)
	}
	tk, ok := a.TakeRun(12<<10, 3, false)
	if !ok {
		t.Fatal("a bulk run of 3 small slices found no credit in an empty window")
	}
	if s := a.Stats(); s.InUse != 12<<10 || s.InFlight != 3 {
		t.Fatalf("after a run of 3: %+v, want 12 KiB and 3 requests in use", s)
	}
	if _, ok := a.TakeBulk(1); ok {
		t.Fatal("a bulk slice passed beside a bulk run that holds the bulk class's requests")
	}
	high, ok := a.TakeRun(4<<10, 1, true)
	if !ok {
		t.Fatal("a high run of one found no credit in the reserve")
	}
	a.Untake(tk, 8<<10, 2) // two of the run's tasks never went
	a.GiveBack(tk, 4<<10, 1)
	a.Give(high, 4<<10)
	if s := a.Stats(); s.InUse != 0 || s.InFlight != 0 {
		t.Fatalf("after Untake and GiveBack: %+v, want nothing in use", s)
	}
	if r := a.Request(); r.Drained != 8<<10 {
		t.Errorf("report %+v: want 8 KiB drained (what was given back, not what was untaken)", r)
	}
}

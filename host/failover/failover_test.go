package failover

import (
	"testing"
	"time"

	"github.com/ferrydev/ferry/sdk/ring"
)

// The tests' transports: 0 and 1 up with rails, 2 restarting.
func transports() []Transport {
	return []Transport{
		{Usable: true, Rails: 0b11},
		{Usable: true, Rails: 0b1},
		{Restarting: true},
	}
}

const sec = int64(time.Second)

func base() Input {
	return Input{From: 0, Rail: -1, Transports: transports(), Plan: []int{0, 1}, Now: 100 * sec, MaxWait: 5 * time.Second}
}

func TestTake(t *testing.T) {
	for _, c := range []struct {
		attempt, attempts int
		died              bool
		blame             Blame
		want              bool
	}{
		{0, 3, true, BlameRequest, true},
		{0, 3, false, BlamePath, true},
		{1, 3, false, BlamePath, true},
		{0, 3, false, BlameTarget, true}, // the target's plugin restarting: another attempt fixes it
		{1, 3, false, BlameTarget, true},
		{2, 3, true, BlamePath, false},     // the last attempt
		{2, 3, false, BlameTarget, false},  // the last attempt
		{0, 1, true, BlamePath, false},     // attempts = 1: no failover at all
		{0, 3, false, BlameRequest, false}, // refused for what it asked
	} {
		if got := Take(c.attempt, c.attempts, c.died, c.blame); got != c.want {
			t.Errorf("Take(attempt %d of %d, died %v, blame %d) = %v, want %v", c.attempt, c.attempts, c.died, c.blame, got, c.want)
		}
	}
}

// The status taxonomy as failover reads it: a region not registered, a
// peer not opened or shut down under the slice are the target changing
// (its plugin restarting, or this engine re-opening the peer), never the
// request's fault; unreachable blames the target on a same-machine
// transport and the path over a network.
func TestClassify(t *testing.T) {
	for _, c := range []struct {
		st          ring.Status
		sameMachine bool
		want        Blame
	}{
		{ring.StatusNotRegistered, true, BlameTarget},
		{ring.StatusNotRegistered, false, BlameTarget},
		{ring.StatusPeerUnknown, false, BlameTarget},
		{ring.StatusShutdown, true, BlameTarget},
		{ring.StatusPeerUnreachable, true, BlameTarget},
		{ring.StatusPeerUnreachable, false, BlamePath},
		{ring.StatusIO, true, BlamePath},
		{ring.StatusTimeout, false, BlamePath},
		{ring.StatusProtocol, false, BlamePath},
		{ring.StatusOK, false, BlameRequest},
		{ring.StatusInvalid, false, BlameRequest},
		{ring.StatusOutOfBounds, true, BlameRequest},
		{ring.StatusPermission, true, BlameRequest},
		{ring.StatusStaleIncarnation, true, BlameRequest}, // the segment is retired: SegmentGone
		{ring.StatusCanceled, false, BlameRequest},
		{ring.StatusUnsupported, true, BlameRequest}, // TakeUnsupported
	} {
		if got := Classify(c.st, c.sameMachine); got != c.want {
			t.Errorf("Classify(%v, same machine %v) = %d, want %d", c.st, c.sameMachine, got, c.want)
		}
	}
}

func TestDecide(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*Input)
		want Decision
	}{
		{"path fault: another rail of the same transport", func(in *Input) { in.PathFault, in.Rail = true, 0 },
			Decision{Kind: RetryRail, Transport: 0, Avoid: 0b01}},
		{"the failing rail is avoided", func(in *Input) { in.PathFault, in.Rail = true, 1 },
			Decision{Kind: RetryRail, Transport: 0, Avoid: 0b10}},
		{"rails avoided add up; the one left is taken", func(in *Input) {
			in.Transports[0].Rails = 0b111
			in.PathFault, in.Rail, in.History.Avoid = true, 1, 0b001
		}, Decision{Kind: RetryRail, Transport: 0, Avoid: 0b011}},
		{"every rail avoided: next transport", func(in *Input) {
			in.PathFault, in.Rail, in.History = true, 1, History{Tried: 0b1, Avoid: 0b01}
		}, Decision{Kind: NextTransport, Transport: 1}},
		{"single-rail transport: next transport", func(in *Input) {
			in.From, in.PathFault, in.Rail, in.History.Tried = 1, true, 0, 0b10
		}, Decision{Kind: NextTransport, Transport: 0}},
		{"rail out of range: next transport", func(in *Input) {
			in.PathFault, in.Rail, in.History.Tried = true, MaxRails, 0b1
		}, Decision{Kind: NextTransport, Transport: 1}},
		{"plugin died (no path fault): next transport not tried", func(in *Input) { in.History.Tried = 0b1 },
			Decision{Kind: NextTransport, Transport: 1}},
		{"failed transport no longer usable: no rail retry", func(in *Input) {
			in.PathFault, in.Rail, in.History.Tried = true, 0, 0b1
			in.Transports[0].Usable = false
			in.Plan = []int{1}
		}, Decision{Kind: NextTransport, Transport: 1}},
		{"all tried, none restarting: the plan's first again", func(in *Input) { in.History.Tried = 0b11 },
			Decision{Kind: NextTransport, Transport: 0}},
		{"all tried, one restarting: wait for any", func(in *Input) { in.History.Tried = 0b111 },
			Decision{Kind: WaitRestart, Transport: -1, Until: 105 * sec}},
		{"selector chose nothing: wait", func(in *Input) { in.Plan = nil },
			Decision{Kind: WaitRestart, Transport: -1, Until: 105 * sec}},
		{"pinned and usable: the same transport", func(in *Input) { in.Pinned, in.History.Tried = true, 0b1 },
			Decision{Kind: NextTransport, Transport: 0}},
		{"pinned never moves: waits for its transport", func(in *Input) {
			in.Pinned, in.From, in.History.Tried = true, 2, 0b100
		}, Decision{Kind: WaitRestart, Transport: 2, Until: 105 * sec}},
		{"pinned with a path fault takes another rail", func(in *Input) {
			in.Pinned, in.PathFault, in.Rail = true, true, 1
		}, Decision{Kind: RetryRail, Transport: 0, Avoid: 0b10}},
		{"segment gone: fail", func(in *Input) { in.SegmentGone = true },
			Decision{Kind: Fail, Transport: -1, Reason: ReasonSegmentGone}},
		{"a rail retry needs no segment lookup", func(in *Input) { in.SegmentGone, in.PathFault, in.Rail = true, true, 0 },
			Decision{Kind: RetryRail, Transport: 0, Avoid: 0b01}},
		{"the task's deadline bounds the wait", func(in *Input) { in.Plan, in.Deadline = nil, 101*sec },
			Decision{Kind: WaitRestart, Transport: -1, Until: 101 * sec}},
		{"unsupported: the next transport not tried", func(in *Input) { in.Unsupported, in.History.Tried = true, 0b1 },
			Decision{Kind: NextTransport, Transport: 1}},
		{"unsupported: never the same transport again", func(in *Input) { in.Unsupported, in.History.Tried = true, 0b11 },
			Decision{Kind: Fail, Transport: -1, Reason: ReasonUnsupported}},
		{"unsupported: an unusable transport is skipped", func(in *Input) {
			in.Unsupported, in.History.Tried, in.Plan = true, 0b1, []int{0, 1, 2}
			in.Transports[1].Usable, in.Transports[2] = false, Transport{Usable: true}
		}, Decision{Kind: NextTransport, Transport: 2}},
		{"unsupported and pinned: fail", func(in *Input) { in.Unsupported, in.Pinned, in.History.Tried = true, true, 0b1 },
			Decision{Kind: Fail, Transport: -1, Reason: ReasonUnsupported}},
		{"target fault: another transport not tried", func(in *Input) { in.TargetFault, in.History.Tried = true, 0b1 },
			Decision{Kind: NextTransport, Transport: 1}},
		{"target fault, every transport tried: wait for the target, not the plan's first", func(in *Input) {
			in.TargetFault, in.History.Tried = true, 0b11
		}, Decision{Kind: WaitTarget, Transport: 0, Until: 105 * sec}},
		{"target fault, pinned: wait for the target, not the same transport at once", func(in *Input) {
			in.TargetFault, in.Pinned, in.History.Tried = true, true, 0b1
		}, Decision{Kind: WaitTarget, Transport: 0, Until: 105 * sec}},
		{"target moved, pinned: the same transport again", func(in *Input) {
			in.TargetFault, in.TargetMoved, in.Pinned, in.History.Tried = true, true, true, 0b1
		}, Decision{Kind: NextTransport, Transport: 0}},
		{"target moved, every transport tried: the plan's first", func(in *Input) {
			in.TargetFault, in.TargetMoved, in.History.Tried = true, true, 0b11
		}, Decision{Kind: NextTransport, Transport: 0}},
		{"target fault, segment gone: fail", func(in *Input) { in.TargetFault, in.SegmentGone = true, true },
			Decision{Kind: Fail, Transport: -1, Reason: ReasonSegmentGone}},
		{"target fault: the deadline bounds the wait", func(in *Input) {
			in.TargetFault, in.Pinned, in.Deadline = true, true, 102*sec
		}, Decision{Kind: WaitTarget, Transport: 0, Until: 102 * sec}},
		{"target fault: the budget bounds the wait", func(in *Input) {
			in.TargetFault, in.Pinned, in.Budget, in.History.FirstFailed = true, true, 3*time.Second, 99*sec
		}, Decision{Kind: WaitTarget, Transport: 0, Until: 102 * sec}},
	} {
		in := base()
		c.edit(&in)
		if got := Decide(&in); got != c.want {
			t.Errorf("%s: Decide = %+v, want %+v", c.name, got, c.want)
		}
	}
}

// TestTargetWaitRunsOnAFakeClock walks a pinned task whose target's
// plugin restarts through time: it waits while the descriptor is the one
// its attempt was sent against, is retried on its transport as soon as
// the target published again, and fails with its own reason when the
// target did not come back by the wait's end (TIMEOUT-bound when its
// deadline came first).
func TestTargetWaitRunsOnAFakeClock(t *testing.T) {
	in := base()
	in.Pinned, in.TargetFault, in.History.Tried = true, true, 0b1
	d := Decide(&in)
	if d.Kind != WaitTarget || d.Transport != 0 || d.Until != 105*sec {
		t.Fatalf("first decision %+v, want a wait for the target until 105s", d)
	}
	in.WaitUntil = d.Until
	in.Now = 102 * sec // a plugin changed state somewhere; the target did not publish
	if d := Decide(&in); d.Kind != WaitTarget || d.Until != 105*sec {
		t.Fatalf("at 102s: %+v, want the same wait", d)
	}
	moved := in
	moved.TargetMoved = true
	if d := Decide(&moved); d.Kind != NextTransport || d.Transport != 0 {
		t.Fatalf("target published again at 102s: %+v, want a retry on transport 0", d)
	}
	in.Now = 105 * sec
	if d := Decide(&in); d.Kind != Fail || d.Reason != ReasonTargetAway || d.Expired {
		t.Fatalf("at 105s: %+v, want fail: %s", d, ReasonTargetAway)
	}
	in.Now, in.Deadline = 104*sec, 104*sec
	if d := Decide(&in); d.Kind != Fail || d.Reason != ReasonDeadline || !d.Expired {
		t.Fatalf("deadline at 104s: %+v, want fail, expired", d)
	}
}

// TestWaitRunsOnAFakeClock walks one wait through time: it keeps its
// end across decisions, fails when no transport came back by then, and
// fails TIMEOUT-bound when the task's deadline comes first.
func TestWaitRunsOnAFakeClock(t *testing.T) {
	in := base()
	in.Pinned, in.From = true, 2
	d := Decide(&in)
	if d.Kind != WaitRestart || d.Until != 105*sec {
		t.Fatalf("first decision %+v, want a wait until 105s", d)
	}
	in.WaitUntil = d.Until
	in.Now = 104 * sec // a transport changed, not ours
	if d := Decide(&in); d.Kind != WaitRestart || d.Until != 105*sec {
		t.Fatalf("at 104s: %+v, want the same wait, until 105s", d)
	}
	in.Now = 105 * sec
	if d := Decide(&in); d.Kind != Fail || d.Reason != ReasonNoTransport || d.Expired {
		t.Fatalf("at 105s: %+v, want fail: %s", d, ReasonNoTransport)
	}
	// Back before the end: the wait is over.
	in.Now = 104 * sec
	in.Transports[2] = Transport{Usable: true}
	if d := Decide(&in); d.Kind != NextTransport || d.Transport != 2 {
		t.Fatalf("restarted at 104s: %+v, want next-transport 2", d)
	}

	in = base()
	in.Plan, in.Deadline = nil, 102*sec
	d = Decide(&in)
	in.WaitUntil, in.Now = d.Until, 102*sec
	if d := Decide(&in); d.Kind != Fail || !d.Expired || d.Reason != ReasonDeadline {
		t.Fatalf("deadline at 102s: %+v, want an expired fail", d)
	}
	// A deadline already past fails at once.
	in = base()
	in.Plan, in.Deadline = nil, 50*sec
	if d := Decide(&in); d.Kind != Fail || !d.Expired {
		t.Fatalf("deadline past: %+v, want an expired fail", d)
	}
}

func TestKindNames(t *testing.T) {
	for k, want := range map[Kind]string{RetryRail: "retry-rail", NextTransport: "next-transport", WaitRestart: "wait-restart", Fail: "fail", 0: "kind(0)"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d) = %q, want %q", uint8(k), got, want)
		}
	}
}

const ms = int64(time.Millisecond)

// paced is base with a 50 ms backoff and a 5 s budget from a first
// failure at 100 s.
func paced() Input {
	in := base()
	in.Backoff, in.Budget = 50*time.Millisecond, 5*time.Second
	in.History.FirstFailed = 100 * sec
	return in
}

func TestBackoff(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*Input)
		want Decision
	}{
		{"first retry: the backoff", func(in *Input) { in.History.Tried = 0b1 },
			Decision{Kind: NextTransport, Transport: 1, At: 100*sec + 50*ms}},
		{"second retry: twice it", func(in *Input) { in.History.Tried, in.Retry = 0b1, 1 },
			Decision{Kind: NextTransport, Transport: 1, At: 100*sec + 100*ms}},
		{"jitter adds up to half", func(in *Input) { in.History.Tried, in.Retry, in.Jitter = 0b1, 1, 0.5 },
			Decision{Kind: NextTransport, Transport: 1, At: 100*sec + 125*ms}},
		{"jitter out of range is clamped", func(in *Input) { in.History.Tried, in.Jitter = 0b1, 7 },
			Decision{Kind: NextTransport, Transport: 1, At: 100*sec + 75*ms}},
		{"a rail retry backs off too", func(in *Input) { in.PathFault, in.Rail = true, 0 },
			Decision{Kind: RetryRail, Transport: 0, Avoid: 0b01, At: 100*sec + 50*ms}},
		{"the doubling is capped and the budget bounds it", func(in *Input) { in.History.Tried, in.Retry = 0b1, 40 },
			Decision{Kind: NextTransport, Transport: 1, At: 105 * sec}},
		{"a backoff past the deadline fails now", func(in *Input) { in.History.Tried, in.Deadline = 0b1, 100*sec+20*ms },
			Decision{Kind: Fail, Transport: -1, Reason: ReasonNoTime}},
		{"the budget spent: fail", func(in *Input) { in.History.Tried, in.Now = 0b1, 105*sec },
			Decision{Kind: Fail, Transport: -1, Reason: ReasonBudget}},
		{"the budget bounds a wait", func(in *Input) { in.Plan, in.Now = nil, 103*sec },
			Decision{Kind: WaitRestart, Transport: -1, Until: 105 * sec}},
		{"no first failure yet: the budget counts from now", func(in *Input) { in.Plan, in.History.FirstFailed, in.MaxWait = nil, 0, time.Minute },
			Decision{Kind: WaitRestart, Transport: -1, Until: 105 * sec}},
		{"a wait is not paced", func(in *Input) { in.Pinned, in.From = true, 2 },
			Decision{Kind: WaitRestart, Transport: 2, Until: 105 * sec}},
		{"the target moved since the attempt: at once, even with a deadline inside the backoff", func(in *Input) {
			in.Pinned, in.TargetFault, in.TargetMoved, in.History.Tried, in.Deadline = true, true, true, 0b1, 100*sec+20*ms
		}, Decision{Kind: NextTransport, Transport: 0}},
		{"a target fault it did not move away from is still waited for", func(in *Input) {
			in.Pinned, in.TargetFault, in.History.Tried = true, true, 0b1
		}, Decision{Kind: WaitTarget, Transport: 0, Until: 105 * sec}},
		{"no backoff: at once", func(in *Input) { in.History.Tried, in.Backoff = 0b1, 0 },
			Decision{Kind: NextTransport, Transport: 1}},
	} {
		in := paced()
		c.edit(&in)
		if got := Decide(&in); got != c.want {
			t.Errorf("%s: Decide = %+v, want %+v", c.name, got, c.want)
		}
	}
}

// TestBackoffSpansABlip walks a task through a 100 ms blip on a fake
// clock: every attempt inside the blip fails, and with the default
// 50 ms backoff the third attempt (the last of three) lands after it,
// whatever the jitter.
func TestBackoffSpansABlip(t *testing.T) {
	for _, jitter := range []float64{0, 0.3, 0.999} {
		in := paced()
		in.Jitter = jitter
		in.Plan, in.Transports = []int{0}, []Transport{{Usable: true}}
		now := in.History.FirstFailed // the first attempt failed at the blip's start
		blipEnd := now + 100*ms
		for retry := 0; retry < 2; retry++ {
			in.Now, in.Retry = now, retry
			d := Decide(&in)
			if d.Kind != NextTransport || d.At <= now {
				t.Fatalf("jitter %v, retry %d: %+v, want a paced retry", jitter, retry, d)
			}
			now = d.At // the retry is sent then, and fails at once while the blip lasts
		}
		if now <= blipEnd {
			t.Errorf("jitter %v: the last attempt is sent at +%v, inside the 100 ms blip", jitter, time.Duration(now-in.History.FirstFailed))
		}
	}
}

package failover

import (
	"time"

	"github.com/ferrydev/ferry/internal/enum"
	"github.com/ferrydev/ferry/sdk/ring"
)

// MaxRails is how many rails a rail mask can name.
const MaxRails = 64

// History is what a task's earlier attempts leave for the next decision.
type History struct {
	// Tried has a bit for each transport (by index) that carried an
	// attempt.
	Tried uint64
	// Avoid has a bit for each rail of the current transport that
	// failed an attempt.
	Avoid uint64
	// FirstFailed is when the task's first attempt failed (unix ns), 0
	// before: the retry budget counts from it.
	FirstFailed int64
}

// Transport is one transport's state as a decision needs it, by index.
type Transport struct {
	// Usable: running and not restarting.
	Usable bool
	// Restarting: its process exited and is being restarted (not a
	// plugin that failed for good).
	Restarting bool
	// Rails has a bit for every rail of its current run; 0 when unknown.
	Rails uint64
}

// Input is what a decision is made from.
type Input struct {
	// From is the transport of the failed attempt, -1 if none.
	From int32
	// Rail is the rail of the first failing slice, -1 if none.
	Rail int
	// PathFault says the failure blames the path the slice took
	// (BlamePath).
	PathFault bool
	// TargetFault says the failure blames the target as this transport
	// reaches it (BlameTarget): its plugin is gone or restarting, or
	// this engine's peer on it was being re-opened.
	TargetFault bool
	// TargetMoved says the segment's descriptor changed since the failed
	// attempt was sent: the target published again (a restarted plugin
	// publishes once it has its registrations back) and this engine
	// re-opened what moved.
	TargetMoved bool
	// Unsupported says the failed transport cannot carry this request at
	// all (StatusUnsupported: shm and a region it cannot share alone):
	// only another transport can, and the failed one is not tried again.
	Unsupported bool
	// Pinned says the request named its transport.
	Pinned bool
	// SegmentGone says the remote segment was closed or retired.
	SegmentGone bool
	History     History
	// Transports holds every transport's state, by index.
	Transports []Transport
	// Plan is the selector's order of transports (indices) for the
	// request with its hint left out; nil when it chose none. Unused
	// for a pinned request.
	Plan []int
	// Now is the time of the decision, unix ns.
	Now int64
	// Deadline is the task's, unix ns, 0 for none.
	Deadline int64
	// WaitUntil is the end of the wait the previous decision started
	// (unix ns), 0 before any wait.
	WaitUntil int64
	// MaxWait bounds a wait for a transport to come back, from the first
	// wait on.
	MaxWait time.Duration
	// Retry counts the task's retries before this decision: the failed
	// attempt's number, from 0.
	Retry int
	// Backoff is the pause before the first retry; each later one is
	// twice the one before, plus Jitter of up to half. 0: retry at once.
	Backoff time.Duration
	// Jitter, in [0, 1), spreads retries of tasks that failed together;
	// the caller draws it from its random source.
	Jitter float64
	// Budget bounds the whole failover from History.FirstFailed: its
	// backoffs and its waits. 0: no bound beyond MaxWait and Deadline.
	Budget time.Duration
}

// Kind is what a decision says to do.
type Kind uint8

const (
	// RetryRail: another attempt on Transport (the failed one), keeping
	// off the rails in Avoid.
	RetryRail Kind = iota + 1
	// NextTransport: another attempt on Transport, on any rail.
	NextTransport
	// WaitRestart: ask again when a transport changes state or at Until,
	// whichever comes first. Transport is the one awaited, -1 for any.
	WaitRestart
	// Fail: end the task with its attempt's cause; Reason says why
	// there was nowhere to go. Expired says the task's own deadline
	// passed meanwhile: it ends TIMEOUT, not FAILED.
	Fail
	// WaitTarget: ask again when the segment's descriptor changes (the
	// target is back) or at Until, whichever comes first. Transport is
	// the failed attempt's.
	WaitTarget
)

var kindNames = [...]string{RetryRail: "retry-rail", NextTransport: "next-transport", WaitRestart: "wait-restart", Fail: "fail", WaitTarget: "wait-target"}

func (k Kind) String() string { return enum.String(k, kindNames[:], "kind") }

// Decision is what to do with a failed attempt.
type Decision struct {
	Kind      Kind
	Transport int32
	Avoid     uint64
	Until     int64
	// At is when a retry (RetryRail, NextTransport) is to be sent, unix
	// ns: its backoff's end. 0: now.
	At      int64
	Reason  string
	Expired bool
}

// Reasons a decision fails a task.
const (
	ReasonSegmentGone = "the segment was closed or retired"
	ReasonNoTransport = "no transport came back in time"
	ReasonDeadline    = "the task's deadline passed while waiting for a transport"
	ReasonBudget      = "the task's retry budget is spent"
	ReasonNoTime      = "the task's deadline comes before its retry's backoff ends"
	ReasonUnsupported = "its transport cannot carry it and no other transport is left to try"
	ReasonTargetAway  = "the target did not come back through its transport in time (its descriptor did not change)"
)

// maxDoublings caps the backoff's growth: Backoff<<maxDoublings is the
// longest pause (the budget bounds it anyway).
const maxDoublings = 10

// Blame is which side a failed slice's status blames: what decides
// whether another attempt could fix it, and where that attempt goes.
type Blame uint8

const (
	// BlameRequest: what the request asked (a range the target does not
	// allow, an invalid descriptor, a deadline passed): another attempt
	// would be refused the same way.
	BlameRequest Blame = iota
	// BlamePath: how the slice travelled (a connection lost, I/O, a
	// timeout in the plugin, a protocol error): another rail or
	// transport may carry it.
	BlamePath
	// BlameTarget: the target as this transport reaches it is changing
	// under the slice. Its plugin is gone or restarting and does not
	// know the region yet, or dropped the mapping with the connection
	// (not registered); a same-machine transport cannot reach its socket
	// (unreachable: no network lies between, so the plugin is gone); or
	// this engine's plugin was re-opening the peer at the restarted
	// plugin's new endpoint (peer not opened, shut down under the
	// slice). The target publishes again once its restarted plugin has
	// its registrations back: its next descriptor ends it.
	BlameTarget
)

// Classify says what a failed slice's status st blames. sameMachine says
// the transport reaches only this machine (sdk.Info.SameMachineOnly), so
// that an unreachable peer is its plugin gone, not a network.
func Classify(st ring.Status, sameMachine bool) Blame {
	switch st {
	case ring.StatusNotRegistered, ring.StatusPeerUnknown, ring.StatusShutdown:
		return BlameTarget
	case ring.StatusPeerUnreachable:
		if sameMachine {
			return BlameTarget
		}
		return BlamePath
	case ring.StatusIO, ring.StatusTimeout, ring.StatusProtocol:
		return BlamePath
	}
	return BlameRequest
}

// Take reports whether a failed attempt is taken for failover: attempt
// (from 0) is not the last of attempts, and the failure is one another
// attempt could fix: died (the plugin died or refused the slices), or a
// status that blames the path or the target (Classify).
func Take(attempt, attempts int, died bool, blame Blame) bool {
	return attempt+1 < attempts && (died || blame != BlameRequest)
}

// TakeUnsupported is Take for an attempt its transport refused as
// unsupported (StatusUnsupported): another transport might carry it.
func TakeUnsupported(attempt, attempts int) bool { return attempt+1 < attempts }

// Decide returns what to do after an attempt failed. A retry's At is
// the end of its backoff, kept inside the budget; a retry whose backoff
// would end past the task's deadline fails instead, and so does any
// decision once the budget is spent. A retry after the target moved is
// not paced: the failure was the move (the peer's plugin restarted or
// was upgraded, and this engine re-opened it at its new endpoint since
// the attempt was sent), which the retry no longer meets, and a backoff
// would only fail a task with a short deadline that the move alone
// touched.
func Decide(in *Input) Decision {
	if end := in.budgetEnd(); end != 0 && in.Now >= end {
		return Decision{Kind: Fail, Transport: -1, Reason: ReasonBudget}
	}
	d := decide(in)
	if (d.Kind == RetryRail || d.Kind == NextTransport) && !(in.TargetFault && in.TargetMoved) {
		return in.pace(d)
	}
	return d
}

// budgetEnd is when the budget runs out (unix ns), 0 for no budget.
func (in *Input) budgetEnd() int64 {
	if in.Budget <= 0 {
		return 0
	}
	first := in.History.FirstFailed
	if first == 0 {
		first = in.Now
	}
	return first + int64(in.Budget)
}

// pace puts retry d off by its backoff: Backoff doubled for each earlier
// retry, plus up to half of that again by Jitter, and no later than the
// budget's end.
func (in *Input) pace(d Decision) Decision {
	if in.Backoff <= 0 {
		return d
	}
	pause := in.Backoff << min(max(in.Retry, 0), maxDoublings)
	j := min(max(in.Jitter, 0), 1)
	pause += time.Duration(j * float64(pause/2))
	at := in.Now + int64(pause)
	if end := in.budgetEnd(); end != 0 && at > end {
		at = end
	}
	if in.Deadline != 0 && at >= in.Deadline {
		return Decision{Kind: Fail, Transport: -1, Reason: ReasonNoTime}
	}
	d.At = at
	return d
}

func decide(in *Input) Decision {
	if avoid, ok := otherRail(in); ok {
		return Decision{Kind: RetryRail, Transport: in.From, Avoid: avoid}
	}
	if in.SegmentGone {
		return Decision{Kind: Fail, Transport: -1, Reason: ReasonSegmentGone}
	}
	if in.Unsupported {
		if !in.Pinned {
			for _, i := range in.Plan {
				if i < 64 && in.History.Tried&(1<<i) == 0 && in.usable(int32(i)) {
					return Decision{Kind: NextTransport, Transport: int32(i)}
				}
			}
		}
		return Decision{Kind: Fail, Transport: -1, Reason: ReasonUnsupported}
	}
	if in.TargetFault && !in.TargetMoved {
		// The target is not back yet: any attempt through the same
		// transport now would meet the same. Another transport may
		// reach it; else wait for its next descriptor.
		if !in.Pinned {
			for _, i := range in.Plan {
				if i < 64 && in.History.Tried&(1<<i) == 0 {
					return Decision{Kind: NextTransport, Transport: int32(i)}
				}
			}
		}
		return in.wait(WaitTarget, in.From, ReasonTargetAway)
	}
	if in.Pinned {
		if in.From >= 0 && in.usable(in.From) {
			return Decision{Kind: NextTransport, Transport: in.From}
		}
		return in.wait(WaitRestart, in.From, ReasonNoTransport)
	}
	if in.Plan != nil {
		for _, i := range in.Plan {
			if i < 64 && in.History.Tried&(1<<i) == 0 {
				return Decision{Kind: NextTransport, Transport: int32(i)}
			}
		}
		if len(in.Plan) > 0 && !in.anyRestarting(in.History.Tried) {
			return Decision{Kind: NextTransport, Transport: int32(in.Plan[0])}
		}
	}
	return in.wait(WaitRestart, -1, ReasonNoTransport)
}

// otherRail returns the rails to avoid when the failed transport can
// retry on another of its rails.
func otherRail(in *Input) (uint64, bool) {
	if !in.PathFault || in.From < 0 || in.Rail < 0 || in.Rail >= MaxRails || !in.usable(in.From) {
		return 0, false
	}
	every := in.Transports[in.From].Rails
	if every == 0 {
		return 0, false
	}
	avoid := in.History.Avoid | 1<<in.Rail
	return avoid, every&^avoid != 0
}

func (in *Input) usable(t int32) bool {
	return int(t) < len(in.Transports) && in.Transports[t].Usable
}

func (in *Input) anyRestarting(mask uint64) bool {
	for i, t := range in.Transports {
		if i < 64 && mask&(1<<i) != 0 && t.Restarting {
			return true
		}
	}
	return false
}

// wait returns a wait of kind k (WaitRestart, WaitTarget) for transport t
// (-1: any), or the failure that ends it when its time is up: reason, or
// the deadline's.
func (in *Input) wait(k Kind, t int32, reason string) Decision {
	until := in.WaitUntil
	if until == 0 {
		until = in.Now + int64(in.MaxWait)
	}
	if end := in.budgetEnd(); end != 0 && end < until {
		until = end
	}
	expired := false
	if in.Deadline != 0 && in.Deadline <= until {
		until, expired = in.Deadline, true
	}
	if in.Now >= until {
		if expired {
			return Decision{Kind: Fail, Transport: -1, Reason: ReasonDeadline, Expired: true}
		}
		return Decision{Kind: Fail, Transport: -1, Reason: reason}
	}
	return Decision{Kind: k, Transport: t, Until: until}
}

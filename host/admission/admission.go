package admission

import (
	"github.com/ferrydev/ferry/internal/enum"
	"github.com/ferrydev/ferry/internal/intent"
	"github.com/ferrydev/ferry/sdk"
)

// Verdict is what an admitter says of a request.
type Verdict uint8

const (
	// Now lets the request go on at once.
	Now Verdict = iota
	// Later holds the request back: it stays PENDING and goes on when
	// admission lets it (the queue when a budget frees; an Admitter when
	// asked again says Now: Asker), or ends with its deadline.
	Later
	// Reject refuses the request.
	Reject
)

var verdictNames = [...]string{Now: "now", Later: "later", Reject: "reject"}

func (v Verdict) String() string { return enum.String(v, verdictNames[:], "verdict") }

// Request is what an admitter knows of a request.
type Request struct {
	// Length in bytes.
	Length uint64
	// Priority as the request gave it.
	Priority sdk.Priority
	// Deadline in unix ns, 0 for none.
	Deadline int64
	// Intent as the request declared it, "" for none.
	Intent intent.Intent
	// Segment is the remote segment's name.
	Segment string
	// Tenant names who the request is for; "" is the default tenant.
	Tenant string
}

// Decision is an admitter's answer.
type Decision struct {
	Verdict Verdict
	// Reason says why a request was not let through now; for the error
	// the engine gives.
	Reason string
}

// Admitter decides whether a request goes on. now is unix ns.
type Admitter interface {
	Admit(r Request, now int64) Decision
}

// PassThrough admits every request now: the default stage.
type PassThrough struct{}

// Admit returns Now.
func (PassThrough) Admit(Request, int64) Decision { return Decision{Verdict: Now} }

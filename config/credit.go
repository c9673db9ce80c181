package config

import (
	"cmp"
	"fmt"
	"time"

	"github.com/ferrydev/ferry/sdk/conf"
)

// Receiver credit's defaults and bounds (the credit block; see
// host/credit and docs/credit.md).
const (
	DefaultCreditInitialBytes    = 8 << 20
	DefaultCreditMaxBytes        = 64 << 20
	DefaultCreditInitialRequests = 64
	DefaultCreditMaxRequests     = 1024
	DefaultCreditInterval        = 50 * time.Millisecond
	DefaultCreditTargetDelay     = 200 * time.Millisecond

	MinCreditBytes       = 64 << 10
	MaxCreditBytes       = 1 << 40
	MaxCreditRequests    = 1 << 20
	MinCreditInterval    = time.Millisecond
	MaxCreditInterval    = 10 * time.Second
	MinCreditTargetDelay = time.Millisecond
	MaxCreditTargetDelay = 10 * time.Second
)

// Credit is receiver credit: how much a sender may have in flight to one
// receiver over a two-sided transport (tcp), as the receiver grants it.
// Every zero (a Config built in code) means its default, and a nil
// Enabled means on.
type Credit struct {
	// Enabled turns credit on for two-sided transports; nil is true.
	Enabled *bool
	// InitialBytes and InitialRequests are what a sender may have in
	// flight to a receiver before its first grant, and after the
	// receiver's loss.
	InitialBytes    int64
	InitialRequests int
	// MaxBytes and MaxRequests bound every grant: a receiver grants no
	// more, and a sender refuses a grant above them.
	MaxBytes    int64
	MaxRequests int
	// Interval is how often a sender that uses credit asks each receiver
	// for a new grant.
	Interval time.Duration
	// TargetDelay is the backlog a receiver lets one sender keep, in
	// time at the drain rate it measured: the grant's AIMD rule.
	TargetDelay time.Duration
}

// On reports whether credit is on.
func (c Credit) On() bool { return c.Enabled == nil || *c.Enabled }

// WithDefaults returns c with every zero setting replaced by its default.
func (c Credit) WithDefaults() Credit {
	c.InitialBytes = cmp.Or(c.InitialBytes, DefaultCreditInitialBytes)
	c.MaxBytes = cmp.Or(c.MaxBytes, max(DefaultCreditMaxBytes, c.InitialBytes))
	c.InitialRequests = cmp.Or(c.InitialRequests, DefaultCreditInitialRequests)
	c.MaxRequests = cmp.Or(c.MaxRequests, max(DefaultCreditMaxRequests, c.InitialRequests))
	c.Interval = cmp.Or(c.Interval, DefaultCreditInterval)
	c.TargetDelay = cmp.Or(c.TargetDelay, DefaultCreditTargetDelay)
	return c
}

var creditTable = &conf.Table[Credit]{
	Name: "credit",
	Doc: "Receiver credit for two-sided transports (tcp; a plugin declares it in Describe): each receiver grants every sender bytes and requests it may have in flight, over the authenticated control service, and adapts the grant to how fast it drains (docs/credit.md). " +
		"Senders wait for credit up to their requests' deadlines. One-sided transports (shm) need none.",
	Fields: []conf.Field[Credit]{
		{Name: "enabled", Type: conf.Bool, Default: true, Lazy: true,
			Doc: "false sends without credit: a fast sender can then fill a slow receiver's plugin.",
			At:  func(c *Credit) any { return &c.Enabled }},
		{Name: "initial_bytes", Type: conf.Size, Default: int64(DefaultCreditInitialBytes), Lazy: true, Min: int64(MinCreditBytes), Max: int64(MaxCreditBytes),
			Doc: "Bytes a sender may have in flight to a receiver before its first grant, and again after the receiver restarted or its control service went away.",
			At:  func(c *Credit) any { return &c.InitialBytes }},
		{Name: "max_bytes", Type: conf.Size, Default: int64(DefaultCreditMaxBytes), Lazy: true, Min: int64(MinCreditBytes), Max: int64(MaxCreditBytes),
			Doc: "The most bytes one grant gives; a receiver grants no more and a sender refuses a grant above it. Give every engine of the cluster the same.",
			At:  func(c *Credit) any { return &c.MaxBytes }},
		{Name: "initial_requests", Type: conf.Int, Default: DefaultCreditInitialRequests, Lazy: true, Min: 1, Max: MaxCreditRequests,
			Doc: "Slices a sender may have in flight to a receiver before its first grant.",
			At:  func(c *Credit) any { return &c.InitialRequests }},
		{Name: "max_requests", Type: conf.Int, Default: DefaultCreditMaxRequests, Lazy: true, Min: 1, Max: MaxCreditRequests,
			Doc: "The most slices one grant gives; a sender refuses a grant above it.",
			At:  func(c *Credit) any { return &c.MaxRequests }},
		{Name: "interval", Type: conf.Duration, Default: DefaultCreditInterval, Lazy: true, Min: MinCreditInterval, Max: MaxCreditInterval,
			Doc: "How often a sender that has credit in use asks the receiver for a new grant.",
			At:  func(c *Credit) any { return &c.Interval }},
		{Name: "target_delay", Type: conf.Duration, Default: DefaultCreditTargetDelay, Lazy: true, Min: MinCreditTargetDelay, Max: MaxCreditTargetDelay,
			Doc: "The backlog a receiver lets one sender keep, in time at the drain rate it measured: a grant grows by one step while the sender waits for credit and the backlog is shorter, and halves while it is longer. What is on the wire counts too, so keep it above the path's round trip.",
			At:  func(c *Credit) any { return &c.TargetDelay }},
	},
}

// validateCredit checks the credit block, whose settings are named with
// prefix ("qos.credit."): each setting's range, then the
// pairs that contradict each other.
func (c *Config) validateCredit(cr *Credit, prefix string) []error {
	var errs []error
	fail := func(field, format string, args ...any) {
		errs = append(errs, conf.ErrorAt(c.where(field), field, format, args...))
	}
	creditTable.Check(cr, prefix, c.has, fail)
	if len(errs) > 0 {
		return errs // a setting out of its range: its pairs say nothing more
	}
	d := cr.WithDefaults()
	if d.InitialBytes > d.MaxBytes {
		fail(prefix+"initial_bytes", "%s is above max_bytes (%s): a sender would start with more than any grant may give; lower initial_bytes or raise max_bytes", sizeText(d.InitialBytes), sizeText(d.MaxBytes))
	}
	if d.InitialRequests > d.MaxRequests {
		fail(prefix+"initial_requests", "%d is above max_requests (%d); lower initial_requests or raise max_requests", d.InitialRequests, d.MaxRequests)
	}
	return errs
}

func sizeText(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

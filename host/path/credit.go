package path

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ferrydev/ferry/host/control"
	"github.com/ferrydev/ferry/host/credit"
	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/host/rails"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Receiver credit (host/credit decides and keeps it; this file wires it
// to the engine; see docs/credit.md). As a receiver the engine answers
// its peers' Credit calls on the control service with its Grantor. As a
// sender it has a credit.Keeper: every slice for a two-sided transport
// (Info.TwoSided: tcp) takes credit at its receiver before it reaches
// the plugin's lane (put), and gives it back as its completion is reaped
// (the lanes' observer).

// creditState is the engine's receiver credit; nil when credit is off.
type creditState struct {
	keeper *credit.Keeper

	gmu     sync.Mutex // serialises the Grantor
	grantor *credit.Grantor
}

// newCredit returns the engine's receiver credit when the configuration
// has it on (the default), else nil; New sets it before the first
// plugin's lanes are observed.
func newCredit(e *Executor) *creditState {
	cfg := e.cfg.QoS.Credit
	if !cfg.On() {
		return nil
	}
	cfg = cfg.WithDefaults()
	lim := credit.Limits{
		InitialBytes: uint64(cfg.InitialBytes), MaxBytes: uint64(cfg.MaxBytes),
		InitialRequests: uint32(cfg.InitialRequests), MaxRequests: uint32(cfg.MaxRequests),
	}
	return &creditState{
		keeper: credit.NewKeeper(credit.KeeperConfig{Limits: lim, Interval: cfg.Interval, Name: e.name, Incarnation: e.incarnation,
			Tracker: e.tracker, Asker: creditAsker{e}, Log: e.log, Quit: e.quit}),
		grantor: credit.NewGrantor(lim, cfg.TargetDelay, e.incarnation),
	}
}

// CreditGranter is what the control service grants credit with; nil
// (Unimplemented to peers) when credit is off.
func (e *Executor) CreditGranter() control.Granter {
	if e.credit == nil {
		return nil
	}
	return e.credit
}

// Grant answers a peer's Credit call (control.Granter).
func (c *creditState) Grant(a control.CreditAsk) (control.CreditGrant, error) {
	c.gmu.Lock()
	g, err := c.grantor.Grant(credit.Sender{Name: a.From, Incarnation: a.FromIncarnation},
		credit.Report{Seq: a.Seq, Drained: a.Drained, InUse: a.InUse, Limited: a.Limited}, time.Now().UnixNano())
	c.gmu.Unlock()
	if err != nil {
		return control.CreditGrant{}, err
	}
	return control.CreditGrant{Epoch: g.Epoch, Seq: g.Seq, Bytes: g.Bytes, Requests: g.Requests}, nil
}

// creditAsker asks receivers over their control services
// (credit.Asker).
type creditAsker struct{ e *Executor }

func (a creditAsker) Ask(ctx context.Context, addr, name string, inc uint64, r credit.Report) (credit.Grant, error) {
	e := a.e
	cl, err := e.hc.Client(addr)
	if err != nil {
		return credit.Grant{}, err
	}
	g, err := cl.Credit(ctx, control.CreditAsk{From: e.name, FromIncarnation: e.incarnation, To: name, ToIncarnation: inc,
		Seq: r.Seq, Drained: r.Drained, InUse: r.InUse, Limited: r.Limited})
	switch status.Code(err) {
	case codes.OK:
		if err != nil {
			return credit.Grant{}, err
		}
		return credit.Grant{Epoch: g.Epoch, Seq: g.Seq, Bytes: g.Bytes, Requests: g.Requests}, nil
	case codes.Unimplemented:
		return credit.Grant{}, errors.Join(credit.ErrNoGrants, err)
	case codes.Unavailable, codes.DeadlineExceeded, codes.FailedPrecondition:
		return credit.Grant{}, errors.Join(credit.ErrGone, err)
	}
	return credit.Grant{}, err
}

// creditFor returns the credit of the receiver rem over the plugin run,
// or nil when the plugin is one-sided or credit is off.
func (e *Executor) creditFor(run *pluginRun, rem *remote) *credit.Peer {
	c := e.credit
	if c == nil || !run.p.Info.TwoSided || rem.Desc == nil {
		return nil
	}
	return c.keeper.Peer(rem.Name, rem.Desc.Incarnation, rem.Desc.Control)
}

// creditFree gives back what the tasks of the batch of n tasks freed
// from slot still hold.
func (e *Executor) creditFree(slot, n int) {
	if e.credit != nil {
		e.credit.keeper.Free(slot, n)
	}
}

// creditDown returns the credit every receiver holds for this engine
// when a two-sided plugin's run ended (Hooks.Down).
func (e *Executor) creditDown(twoSided bool) {
	if e.credit != nil && twoSided {
		e.credit.keeper.Down()
	}
}

// reapedHook is the tracker's hook for the completions every lane
// reaps: they go to the rail set of the plugin run that owns the lane
// (progress.Lane.Owner, which the plugins' hooks set), and to receiver
// credit when it is on.
func (e *Executor) reapedHook() progress.Hook {
	var k *credit.Keeper
	if e.credit != nil {
		k = e.credit.keeper
	}
	return progress.Hook{Reaped: func(l *progress.Lane, ds []ring.Descriptor) {
		if rs, ok := l.Owner.(*rails.Set); ok {
			rs.Reaped(ds)
		}
		if k != nil {
			k.Reaped(ds)
		}
	}}
}

// railsOf returns the rail set a run's lanes are owned by (the plugins'
// hooks' Owner built it), nil for none.
func railsOf(owner any) *rails.Set {
	rs, _ := owner.(*rails.Set)
	return rs
}

// CreditStats is this engine's receiver credit at one receiver, as a
// sender.
type CreditStats = credit.PeerStats

// CreditStats is host.Engine.CreditStats, which documents it.
func (e *Executor) CreditStats() []CreditStats {
	if e.credit == nil {
		return nil
	}
	return e.credit.keeper.Stats()
}

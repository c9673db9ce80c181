package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ferrydev/ferry/host/control"
	"github.com/ferrydev/ferry/host/notify"
	"github.com/ferrydev/ferry/host/progress"
)

// NotificationBuffer is how many received notifications Notifications()
// holds for a slow reader. When it is full the engine refuses new ones
// (the sender sees ResourceExhausted and retries with backoff) rather
// than dropping one it acknowledged: a notification is either in the
// channel or its sender was told it was not taken. Refusals are counted
// in EngineStatus.Notifications.Refused.
const NotificationBuffer = 1024

// Notification is a message from a peer engine: its segment name (From), a
// name and a small message (at most control.MaxMessage bytes).
type Notification = notify.Notification

// notifyErr puts an error of package notify under the public sentinel of
// the same meaning; its text is unchanged.
func notifyErr(err error) error {
	switch {
	case errors.Is(err, notify.ErrUnreachable):
		return asKind(ErrTransportUnavailable, err)
	case errors.Is(err, notify.ErrClosed):
		return asKind(ErrClosed, err)
	}
	return err
}

// startControl starts the control service on the configured address; the
// descriptor published next carries its address.
func (e *Engine) startControl() error {
	rails := railAddrs(e.x.Plugins())
	listen, warn := controlListen(e.cfg.Control.Listen, rails)
	if warn != "" {
		e.log.Warn(warn)
	}
	hc, err := notify.Start(notify.Config{
		Listen: listen, Name: e.name, Incarnation: e.incarnation,
		Buffer: NotificationBuffer, Secret: e.secret, Source: (*controlSource)(e), Log: e.log,
		Credit: e.x.CreditGranter(),
		Fence:  e.x.FenceServer(),
		Stage:  e.x.StageServer(),
	})
	if err != nil {
		return err
	}
	e.hc = hc
	addr, ok := controlPublished(hc.Addr(), rails, allInterfaceAddrs())
	if !ok {
		e.log.Warn("the control service listens on every interface, but this engine has no routable address to publish: peers on other hosts cannot reach it; set control { listen } to an address they can reach", "listen", hc.Addr(), "published", addr)
	}
	e.controlAddr = addr
	return nil
}

// ControlAddr returns the address of the engine's control service, which
// its descriptor publishes and which peers in peer-to-peer mode open as a
// segment name.
func (e *Engine) ControlAddr() string { return e.controlAddr }

// Notifications returns the channel of notifications peers sent to this
// engine, each delivered once (see NotificationBuffer for a slow reader).
// Close closes it.
func (e *Engine) Notifications() <-chan Notification { return e.hc.Notifications() }

// controlSource is the engine as its control service serves it.
type controlSource Engine

// Descriptor returns the local descriptor as peers read it: signed with
// a cluster secret.
func (s *controlSource) Descriptor() ([]byte, error) {
	return s.signer.Encode((*Engine)(s).descriptor())
}

func (s *controlSource) Status() ([]byte, error) {
	e := (*Engine)(s)
	ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
	defer cancel()
	return json.Marshal(e.Status(ctx))
}

// targetOf returns r as a peer to notify, or why it cannot be one.
func targetOf(r *remote) (notify.Target, error) {
	if r.Desc.Control == "" {
		return notify.Target{}, fmt.Errorf("%w: segment %q publishes no control service (an engine older than notifications)", ErrTransportUnavailable, r.Name)
	}
	return notify.Target{Segment: r.ID, Name: r.Name, Control: r.Desc.Control, Incarnation: r.Desc.Incarnation}, nil
}

// Notify sends one notification to an open segment and returns once the
// peer took it. A call that fails on the way is retried a bounded number
// of times (control.DefaultRetry) under one idempotency key, so the peer
// delivers it exactly once however many calls reached it; the error, if
// any, is the last call's.
func (e *Engine) Notify(ctx context.Context, seg SegmentID, name string, msg []byte) error {
	if e.x.Closed() {
		return ErrClosed
	}
	if name == "" || len(name) > control.MaxName || len(msg) > control.MaxMessage {
		return fmt.Errorf("%w: notify: a name of 1 to %d bytes is required and the message holds at most %d bytes", ErrInvalid, control.MaxName, control.MaxMessage)
	}
	r := e.segs.Get(uint32(seg))
	if r == nil {
		return fmt.Errorf("%w: notify: segment handle %d is not open", ErrSegmentNotFound, seg)
	}
	t, err := targetOf(r)
	if err != nil {
		return err
	}
	return notifyErr(e.hc.Send(ctx, t, Notification{Name: name, Msg: msg}, e.hc.NextKey()))
}

// SubmitWithNotify submits reqs like Submit and, once every task of this
// submission has ended COMPLETED, sends n to each segment the requests
// target, exactly once (see Notify for the retries). The notification goes
// out asynchronously: Wait returning does not mean the peer has it yet.
//
// If any task of the submission ends otherwise (FAILED, INVALID, CANCELED,
// TIMEOUT), the notification is sent to no one: it tells the peer that its
// data landed, which is then not true for every request; the caller learns
// of the failure from the batch and decides what to tell the peer. The same
// holds when the batch is freed or the engine closed before the tasks
// ended. Such submissions are counted in EngineStatus.Notifications.NotSent, and
// sends that fail after the retries in SendFailed (and logged).
//
// Do not Submit to the same batch concurrently with SubmitWithNotify: the
// submission is the range of tasks it added.
func (e *Engine) SubmitWithNotify(id BatchID, n Notification, reqs ...Request) error {
	if n.Name == "" || len(n.Name) > control.MaxName || len(n.Msg) > control.MaxMessage {
		return fmt.Errorf("%w: submit with notify: a name of 1 to %d bytes is required and the message holds at most %d bytes", ErrInvalid, control.MaxName, control.MaxMessage)
	}
	var targets []notify.Target
	for k := range reqs {
		r := e.segs.Get(uint32(reqs[k].Segment))
		if r == nil || hasTarget(targets, r.ID) {
			continue // an unopened segment makes its task INVALID: nothing is sent
		}
		t, err := targetOf(r)
		if err != nil {
			return err
		}
		targets = append(targets, t)
	}
	return notifyErr(e.x.SubmitWithNotify(id, reqs, func(b *progress.Batch, start, end int) error {
		return e.hc.Pend(b, start, end, n, targets)
	}))
}

func hasTarget(l []notify.Target, seg uint32) bool {
	for _, t := range l {
		if t.Segment == seg {
			return true
		}
	}
	return false
}

// controlIdle is how long a cached control client of an address no open
// segment publishes is kept after its last use: longer than one control
// call (controlTimeout), so that a call in flight keeps its client.
const controlIdle = controlTimeout + 5*time.Second

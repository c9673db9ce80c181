package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host/control"
	"github.com/ferrydev/ferry/host/notify"
	"github.com/ferrydev/ferry/host/progress"
)

// NotificationBuffer is how many received notifications Notifications()
// holds for a slow reader. When it is full the engine refuses new ones
// (the sender sees ResourceExhausted and retries with backoff) rather
// than dropping one it acknowledged: a notification is either in the
// channel or its sender was told it was not taken. Refusals are counted
// in NotificationStats.Refused.
const NotificationBuffer = 1024

// Notification is a message from a peer engine: its segment name (From), a
// name and a small message (at most control.MaxMessage bytes).
type Notification = notify.Notification

// NotificationStats counts notifications sent and received by an engine.
type NotificationStats = notify.Stats

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
	secret, err := controlSecret(e.cfg)
	if err != nil {
		return fmt.Errorf("%w: engine %q: control service: %w", ErrInvalid, e.name, err)
	}
	hc, err := notify.Start(notify.Config{
		Listen: e.cfg.Control.ListenAddr(), Name: e.name, Incarnation: e.incarnation,
		Buffer: NotificationBuffer, Secret: secret, Source: (*controlSource)(e), Log: e.log,
	})
	if err != nil {
		return err
	}
	e.hc = hc
	return nil
}

// controlSecret returns the cluster secret that authenticates the control
// service (notifications and Status), or nil when there is none. Until
// the engine has a cluster secret of its own, it is the tcp plugin's:
// cluster_secret or cluster_secret_file in the config block of an enabled
// plugin "tcp", read the way the plugin reads it (a relative file from
// the config file's directory, one trailing newline trimmed, at least 16
// bytes), so that the engines that share a data-plane secret share this
// one.
func controlSecret(cfg *config.Config) ([]byte, error) {
	for _, pc := range cfg.Plugins {
		if pc.Name != "tcp" || !pc.Enabled || len(pc.Body) == 0 {
			continue
		}
		f, diags := hclsyntax.ParseConfig(pc.Body, pc.BodyFile, hcl.Pos{Line: pc.BodyLine, Column: pc.BodyColumn, Byte: pc.BodyByte})
		if diags.HasErrors() {
			return nil, fmt.Errorf("plugin %q config: %w", pc.Name, diags)
		}
		attrs := f.Body.(*hclsyntax.Body).Attributes
		if a := attrs["cluster_secret"]; a != nil {
			v, err := secretString(a)
			if err != nil || len(v) < minSecret {
				return nil, fmt.Errorf("%s: plugin %q: cluster_secret must be a string of at least %d bytes, the same on every engine", a.SrcRange, pc.Name, minSecret)
			}
			return []byte(v), nil
		}
		if a := attrs["cluster_secret_file"]; a != nil {
			path, err := secretString(a)
			if err != nil || path == "" {
				return nil, fmt.Errorf("%s: plugin %q: cluster_secret_file must name the file that holds the cluster secret", a.SrcRange, pc.Name)
			}
			if !filepath.IsAbs(path) && pc.BodyFile != "" {
				path = filepath.Join(filepath.Dir(pc.BodyFile), path)
			}
			b, err := readSecret(path)
			if err != nil {
				return nil, fmt.Errorf("%s: plugin %q: cluster_secret_file: %w", a.SrcRange, pc.Name, err)
			}
			return b, nil
		}
	}
	return nil, nil
}

// minSecret is the tcp plugin's shortest cluster secret.
const minSecret = 16

func secretString(a *hclsyntax.Attribute) (string, error) {
	v, diags := a.Expr.Value(nil)
	if diags.HasErrors() {
		return "", diags
	}
	if v.IsNull() || !v.IsKnown() || v.Type() != cty.String {
		return "", errors.New("not a string")
	}
	return v.AsString(), nil
}

// readSecret reads a cluster secret file as the tcp plugin does.
func readSecret(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w; make the file readable by the engine, or set cluster_secret instead", err)
	}
	if fi.Size() > 64<<10 {
		return nil, fmt.Errorf("%s: larger than 64 KiB; is this the secret file?", path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w; make the file readable by the engine, or set cluster_secret instead", err)
	}
	b = bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r"))
	if len(b) < minSecret {
		return nil, fmt.Errorf("%s: the secret is %d bytes, too short; write at least %d random bytes into it, the same on every engine", path, len(b), minSecret)
	}
	return b, nil
}

// stopControl stops sending, then serving, then closes the channel of
// received notifications: after Close, a reader of Notifications() drains
// what was delivered and sees the channel closed. Pending SubmitWithNotify
// notifications are not sent.
func (e *Engine) stopControl() {
	if e.hc != nil {
		e.hc.Close()
	}
}

// ControlAddr returns the address of the engine's control service, which
// its descriptor publishes and which peers in peer-to-peer mode open as a
// segment name.
func (e *Engine) ControlAddr() string {
	if e.hc == nil {
		return ""
	}
	return e.hc.Addr()
}

// Notifications returns the channel of notifications peers sent to this
// engine, each delivered once (see NotificationBuffer for a slow reader).
// Close closes it.
func (e *Engine) Notifications() <-chan Notification { return e.hc.Notifications() }

// NotificationStats returns the engine's notification counters.
func (e *Engine) NotificationStats() NotificationStats { return e.hc.Stats() }

// controlSource is the engine as its control service serves it.
type controlSource Engine

func (s *controlSource) Descriptor() ([]byte, error) { return (*Engine)(s).encodeDescriptor() }

// EngineStatus is what an engine reports of itself to operators through
// its control service (`ferry plugins --engine`).
type EngineStatus struct {
	Name        string         `json:"name"`
	Incarnation uint64         `json:"incarnation"`
	Plugins     []PluginStatus `json:"plugins"`
	Rails       []RailStatus   `json:"rails"`
}

func (s *controlSource) Status() ([]byte, error) {
	e := (*Engine)(s)
	ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
	defer cancel()
	return json.Marshal(EngineStatus{Name: e.name, Incarnation: e.incarnation, Plugins: e.Plugins(ctx), Rails: e.Rails()})
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
	if e.closed.Load() {
		return ErrClosed
	}
	if name == "" || len(name) > control.MaxName || len(msg) > control.MaxMessage {
		return fmt.Errorf("%w: notify: a name of 1 to %d bytes is required and the message holds at most %d bytes", ErrInvalid, control.MaxName, control.MaxMessage)
	}
	r := e.remote(seg)
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
// ended. Such submissions are counted in NotificationStats.NotSent, and
// sends that fail after the retries in SendFailed (and logged).
//
// Do not Submit to the same batch concurrently with SubmitWithNotify: the
// submission is the range of tasks it added.
func (e *Engine) SubmitWithNotify(id BatchID, n Notification, reqs ...Request) error {
	if id.b == nil {
		return fmt.Errorf("%w: submit: zero BatchID", ErrInvalid)
	}
	if n.Name == "" || len(n.Name) > control.MaxName || len(n.Msg) > control.MaxMessage {
		return fmt.Errorf("%w: submit with notify: a name of 1 to %d bytes is required and the message holds at most %d bytes", ErrInvalid, control.MaxName, control.MaxMessage)
	}
	var targets []notify.Target
	for k := range reqs {
		r := e.remote(reqs[k].Segment)
		if r == nil || hasTarget(targets, r.ID) {
			continue // an unopened segment makes its task INVALID: nothing is sent
		}
		t, err := targetOf(r)
		if err != nil {
			return err
		}
		targets = append(targets, t)
	}
	start := id.b.Len()
	if err := e.Submit(id, reqs...); err != nil {
		return err
	}
	return notifyErr(e.hc.Pend(id.b, start, id.b.Len(), n, targets))
}

func hasTarget(l []notify.Target, seg uint32) bool {
	for _, t := range l {
		if t.Segment == seg {
			return true
		}
	}
	return false
}

// settleNotifies decides the SubmitWithNotify submissions of batch b
// whose tasks all ended; FreeBatch calls it before the batch can be
// reused (see notify.Service.Settle).
func (e *Engine) settleNotifies(b *progress.Batch) {
	if e.hc != nil {
		e.hc.Settle(b)
	}
}

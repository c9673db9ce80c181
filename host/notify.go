package host

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrydev/ferry/host/control"
	"github.com/ferrydev/ferry/host/progress"
)

// NotificationBuffer is how many received notifications Notifications()
// holds for a slow reader. When it is full the engine refuses new ones
// (the sender sees ResourceExhausted and retries with backoff) rather
// than dropping one it acknowledged: a notification is either in the
// channel or its sender was told it was not taken. Refusals are counted
// in NotificationStats.Refused.
const NotificationBuffer = 1024

// notifyPoll is how often pending SubmitWithNotify submissions are checked
// for completion while any are pending; none pending, nothing polls.
const notifyPoll = time.Millisecond

// Notification is a message from a peer engine: its segment name (From), a
// name and a small message (at most control.MaxMessage bytes).
type Notification struct {
	From string // set on received notifications; ignored when sending
	Name string
	Msg  []byte
}

// NotificationStats counts notifications sent and received by an engine.
type NotificationStats struct {
	Received   uint64 // delivered to Notifications()
	Duplicates uint64 // retries of a delivered notification, acknowledged, not delivered again
	Refused    uint64 // refused: the buffer was full, or an older incarnation was addressed
	Sent       uint64 // notifications a peer acknowledged
	SendFailed uint64 // notifications given up after the retries
	NotSent    uint64 // SubmitWithNotify submissions that did not all complete
}

// hostControl is the engine's side of host/control: the server peers call,
// clients for the peers it calls, and notifications in flight.
type hostControl struct {
	srv  *control.Server
	ch   chan Notification
	seq  atomic.Uint64 // notification keys: one per Notify and per SubmitWithNotify
	sent atomic.Uint64
	fail atomic.Uint64
	skip atomic.Uint64

	ctx    context.Context // ends at Close: senders and the watcher stop
	cancel context.CancelFunc
	wg     sync.WaitGroup // the watcher and the senders

	mu      sync.Mutex
	clients map[string]*control.Client // by address
	pending []*pendingNotify
	kick    chan struct{} // the watcher has pending work
}

// pendingNotify is a SubmitWithNotify submission not yet ended: tasks
// [start, end) of b.
type pendingNotify struct {
	b          *progress.Batch
	start, end int
	n          Notification
	key        string
	targets    []*remote
}

// startControl starts the control service on the configured address; the
// descriptor published next carries its address.
func (e *Engine) startControl() error {
	hc := &hostControl{
		ch:      make(chan Notification, NotificationBuffer),
		clients: make(map[string]*control.Client),
		kick:    make(chan struct{}, 1),
	}
	hc.ctx, hc.cancel = context.WithCancel(context.Background())
	srv, err := control.Listen(e.cfg.Control.ListenAddr(), (*controlHandler)(e))
	if err != nil {
		hc.cancel()
		return fmt.Errorf("engine %q: %w", e.name, err)
	}
	hc.srv = srv
	e.hc = hc
	hc.wg.Add(1)
	go e.watchNotifies()
	return nil
}

// stopControl stops sending, then serving, then closes the channel of
// received notifications: after Close, a reader of Notifications() drains
// what was delivered and sees the channel closed. Pending SubmitWithNotify
// notifications are not sent.
func (e *Engine) stopControl() {
	hc := e.hc
	if hc == nil {
		return
	}
	hc.cancel()
	hc.wg.Wait()
	hc.srv.Close()
	close(hc.ch)
	hc.mu.Lock()
	for _, c := range hc.clients {
		c.Close()
	}
	hc.clients = nil
	hc.pending = nil
	hc.mu.Unlock()
}

// ControlAddr returns the address of the engine's control service, which
// its descriptor publishes and which peers in peer-to-peer mode open as a
// segment name.
func (e *Engine) ControlAddr() string {
	if e.hc == nil {
		return ""
	}
	return e.hc.srv.Addr()
}

// Notifications returns the channel of notifications peers sent to this
// engine, each delivered once (see NotificationBuffer for a slow reader).
// Close closes it.
func (e *Engine) Notifications() <-chan Notification { return e.hc.ch }

// NotificationStats returns the engine's notification counters.
func (e *Engine) NotificationStats() NotificationStats {
	st := e.hc.srv.Stats()
	return NotificationStats{
		Received: st.Delivered, Duplicates: st.Duplicates, Refused: st.Refused,
		Sent: e.hc.sent.Load(), SendFailed: e.hc.fail.Load(), NotSent: e.hc.skip.Load(),
	}
}

// controlHandler is the engine as host/control sees it.
type controlHandler Engine

func (h *controlHandler) Descriptor() ([]byte, error) {
	e := (*Engine)(h)
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.descriptor().Encode()
}

func (h *controlHandler) Identity() (string, uint64) { return h.name, h.incarnation }

// EngineStatus is what an engine reports of itself to operators through
// its control service (`ferry plugins --engine`).
type EngineStatus struct {
	Name        string         `json:"name"`
	Incarnation uint64         `json:"incarnation"`
	Plugins     []PluginStatus `json:"plugins"`
	Rails       []RailStatus   `json:"rails"`
}

func (h *controlHandler) Status() ([]byte, error) {
	e := (*Engine)(h)
	ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
	defer cancel()
	return json.Marshal(EngineStatus{Name: e.name, Incarnation: e.incarnation, Plugins: e.Plugins(ctx), Rails: e.Rails()})
}

func (h *controlHandler) Deliver(n control.Notification) error {
	select {
	case h.hc.ch <- Notification{From: n.From, Name: n.Name, Msg: n.Msg}:
		return nil
	default:
		return control.ErrFull
	}
}

// client returns the cached client for a peer's control service.
func (hc *hostControl) client(addr string) (*control.Client, error) {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	if hc.clients == nil {
		return nil, ErrClosed
	}
	if c := hc.clients[addr]; c != nil {
		return c, nil
	}
	c, err := control.Dial(addr)
	if err != nil {
		return nil, err
	}
	hc.clients[addr] = c
	return c, nil
}

// nextKey returns a fresh idempotency key: this incarnation and a
// sequence number, so that keys never repeat across the engine's lives.
func (e *Engine) nextKey() string {
	return strconv.FormatUint(e.incarnation, 16) + "-" + strconv.FormatUint(e.hc.seq.Add(1), 10)
}

func controlAddrOf(r *remote) (string, error) {
	if r.Desc.Control == "" {
		return "", fmt.Errorf("%w: segment %q publishes no control service (an engine older than notifications)", ErrTransportUnavailable, r.Name)
	}
	return r.Desc.Control, nil
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
	if name == "" || len(msg) > control.MaxMessage {
		return fmt.Errorf("%w: notify: a name is required and the message holds at most %d bytes", ErrInvalid, control.MaxMessage)
	}
	r := e.remote(seg)
	if r == nil {
		return fmt.Errorf("%w: notify: segment handle %d is not open", ErrSegmentNotFound, seg)
	}
	return e.send(ctx, r, Notification{Name: name, Msg: msg}, e.nextKey())
}

func (e *Engine) send(ctx context.Context, r *remote, n Notification, key string) error {
	addr, err := controlAddrOf(r)
	if err != nil {
		return err
	}
	c, err := e.hc.client(addr)
	if err != nil {
		return err
	}
	_, err = c.Notify(ctx, control.Notification{
		From: e.name, FromIncarnation: e.incarnation, ToIncarnation: r.Desc.Incarnation,
		Name: n.Name, Msg: n.Msg, Key: key,
	}, control.DefaultRetry)
	if err != nil {
		e.hc.fail.Add(1)
		return fmt.Errorf("%w: notify segment %q: %w", ErrTransportUnavailable, r.Name, err)
	}
	e.hc.sent.Add(1)
	return nil
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
	if n.Name == "" || len(n.Msg) > control.MaxMessage {
		return fmt.Errorf("%w: submit with notify: a name is required and the message holds at most %d bytes", ErrInvalid, control.MaxMessage)
	}
	var targets []*remote
	for k := range reqs {
		r := e.remote(reqs[k].Segment)
		if r == nil || slicesContains(targets, r) {
			continue // an unopened segment makes its task INVALID: nothing is sent
		}
		if _, err := controlAddrOf(r); err != nil {
			return err
		}
		targets = append(targets, r)
	}
	start := id.b.Len()
	if err := e.Submit(id, reqs...); err != nil {
		return err
	}
	p := &pendingNotify{b: id.b, start: start, end: id.b.Len(), n: n, key: e.nextKey(), targets: targets}
	e.hc.mu.Lock()
	if e.hc.clients == nil { // closed meanwhile
		e.hc.mu.Unlock()
		return ErrClosed
	}
	e.hc.pending = append(e.hc.pending, p)
	e.hc.mu.Unlock()
	select {
	case e.hc.kick <- struct{}{}:
	default:
	}
	return nil
}

func slicesContains(l []*remote, r *remote) bool {
	for _, x := range l {
		if x.ID == r.ID {
			return true
		}
	}
	return false
}

// watchNotifies settles pending submissions as their tasks end. Batches
// wake only their waiter, so it polls, and only while any are pending.
func (e *Engine) watchNotifies() {
	hc := e.hc
	defer hc.wg.Done()
	t := time.NewTicker(notifyPoll)
	defer t.Stop()
	for {
		hc.mu.Lock()
		idle := len(hc.pending) == 0
		hc.mu.Unlock()
		if idle {
			select {
			case <-hc.kick:
			case <-hc.ctx.Done():
				return
			}
		}
		select {
		case <-t.C:
		case <-hc.ctx.Done():
			return
		}
		e.settleNotifies(nil)
	}
}

// settleNotifies decides every pending submission whose tasks all ended
// (of batch b only, when b is not nil): send, or not. FreeBatch calls it
// after canceling the batch and before the batch can be reused, so a
// submission is always decided on its own tasks.
func (e *Engine) settleNotifies(b *progress.Batch) {
	hc := e.hc
	if hc == nil {
		return
	}
	now := progress.Now()
	hc.mu.Lock()
	defer hc.mu.Unlock()
	keep := hc.pending[:0]
	for _, p := range hc.pending {
		if b != nil && p.b != b {
			keep = append(keep, p)
			continue
		}
		ended, completed := true, true
		for i := p.start; i < p.end; i++ {
			switch p.b.State(i, now) {
			case progress.Pending:
				ended = false
			case progress.Completed:
			default:
				completed = false
			}
		}
		switch {
		case !ended:
			keep = append(keep, p)
		case !completed || hc.ctx.Err() != nil:
			hc.skip.Add(1)
		default:
			hc.wg.Add(1)
			go e.sendAll(p)
		}
	}
	clear(hc.pending[len(keep):])
	hc.pending = keep
}

func (e *Engine) sendAll(p *pendingNotify) {
	defer e.hc.wg.Done()
	for _, r := range p.targets {
		if err := e.send(e.hc.ctx, r, p.n, p.key); err != nil {
			e.log.Error("notification not delivered", "segment", r.Name, "name", p.n.Name, "error", err)
		}
	}
}

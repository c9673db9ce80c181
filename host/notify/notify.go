package notify

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/host/control"
	"github.com/ferrydev/ferry/host/progress"
)

// Errors a Service returns, wrapped with the peer and what failed. Their
// texts are the public API's (package host), which maps them onto its own
// sentinels.
var (
	ErrUnreachable = errors.New("transport unavailable")
	ErrClosed      = errors.New("engine closed")
)

// Poll is how often pending SubmitWithNotify submissions are checked for
// completion while any are pending; none pending, nothing polls.
const Poll = time.Millisecond

// Notification is a message from a peer engine: its segment name (From), a
// name and a small message (at most control.MaxMessage bytes).
type Notification struct {
	From string // set on received notifications; ignored when sending
	Name string
	Msg  []byte
}

// Stats counts notifications sent and received by an engine.
type Stats struct {
	Received     uint64 // delivered to Notifications()
	Duplicates   uint64 // retries of a delivered notification, acknowledged, not delivered again
	Refused      uint64 // refused: the buffer (or the sender's fair share of it) was full, or an older incarnation was addressed
	Forged       uint64 // refused: not signed with this engine's cluster secret, or outside the replay window
	Invalid      uint64 // refused: a field missing or over its bound (control.MaxName, MaxKey, MaxMessage)
	StatusDenied uint64 // control Status calls refused: not signed with the cluster secret
	Sent         uint64 // notifications a peer acknowledged
	SendFailed   uint64 // notifications given up after the retries
	NotSent      uint64 // SubmitWithNotify submissions that did not all complete
}

// Target is a peer to notify: one life of an open segment.
type Target struct {
	Segment     uint32 // the handle, to send once per segment
	Name        string
	Control     string // its control service's address
	Incarnation uint64
}

// Source is what the control service serves of its engine.
type Source interface {
	// Descriptor returns the engine's current descriptor JSON.
	Descriptor() ([]byte, error)
	// Status returns the engine's plugin and rail status as JSON.
	Status() ([]byte, error)
}

// Config says where a Service listens and for whom.
type Config struct {
	Listen      string // host:port; port 0 picks one
	Name        string // the engine's segment name
	Incarnation uint64
	Buffer      int // received notifications held for a slow reader
	// Secret is the cluster secret: with one, notifications are sent
	// MACed under it and only ones MACed under it are delivered, and the
	// control Status call needs it (see control.Options). Without one
	// nothing on the control service is authenticated, and Start says so
	// in a warning.
	Secret []byte
	Source Source
	Log    hclog.Logger
	// Credit grants receiver credit to peers (control.Options.Credit);
	// nil grants none.
	Credit control.Granter
	// Fence fences peers' plugin runs in this engine's plugins
	// (control.Options.Fence); nil answers Fence Unimplemented.
	Fence control.Fencer
	// Stage serves peers' staged requests into this engine's device
	// memory (control.Options.Stage); nil answers Stage Unimplemented.
	Stage control.Stager
}

// Service is an engine's control service and its notifications.
type Service struct {
	name        string
	incarnation uint64
	src         Source
	log         hclog.Logger
	secret      []byte
	srv         *control.Server
	buf         fairBuffer

	sent atomic.Uint64
	fail atomic.Uint64
	skip atomic.Uint64

	ctx       context.Context // ends at Close: senders and the settler stop
	cancel    context.CancelFunc
	wg        sync.WaitGroup // the settler
	sends     sync.WaitGroup // the senders (sendAll)
	closeOnce sync.Once

	mu      sync.Mutex
	closing bool                       // Close began: Settle starts no send
	clients map[string]*control.Client // by address; nil once closed
	used    map[string]time.Time       // when each client was last handed out
	pending []*pending
	kick    chan struct{} // the settler has pending work
}

// pending is a SubmitWithNotify submission not yet ended: tasks
// [start, end) of b.
type pending struct {
	b          *progress.Batch
	start, end int
	n          Notification
	key        string
	targets    []Target
}

// Start serves the control service on c.Listen and starts the settler.
func Start(c Config) (*Service, error) {
	s := &Service{
		name: c.Name, incarnation: c.Incarnation, secret: c.Secret, src: c.Source, log: c.Log,
		buf:     newFairBuffer(c.Buffer),
		clients: make(map[string]*control.Client),
		kick:    make(chan struct{}, 1),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	srv, err := control.Listen(c.Listen, (*handler)(s), control.Options{Secret: c.Secret, Credit: c.Credit, Fence: c.Fence, Stage: c.Stage})
	if err != nil {
		s.cancel()
		return nil, fmt.Errorf("engine %q: %w", c.Name, err)
	}
	s.srv = srv
	// Without a secret it is unauthenticated: the engine's start warning
	// (host/exposure) says so.
	s.wg.Add(1)
	go s.settler()
	return s, nil
}

// Close stops sending, then serving, then closes the channel of received
// notifications: a reader drains what was delivered and sees the channel
// closed. Sends under way (their submissions completed) get closeGrace to
// finish first; pending submissions' notifications are not sent. Safe to
// call twice.
func (s *Service) Close() { s.closeOnce.Do(s.close) }

// closeGrace is how long Close lets notifications already being sent
// finish before it cancels them: a notification whose transfer landed is
// worth delivering, and a send canceled after the peer took it would be
// reported lost. A loopback send takes a millisecond or two.
const closeGrace = time.Second

func (s *Service) close() {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	sent := make(chan struct{})
	go func() { // ends when the sends do, canceled below at the latest
		s.sends.Wait()
		close(sent)
	}()
	grace := time.NewTimer(closeGrace)
	select {
	case <-sent:
	case <-grace.C:
	}
	grace.Stop()
	s.cancel()
	<-sent
	s.wg.Wait()
	s.srv.Close()
	close(s.buf.ch)
	s.mu.Lock()
	for _, c := range s.clients {
		c.Close()
	}
	s.clients = nil
	s.pending = nil
	s.mu.Unlock()
}

// Addr returns the address the control service listens on.
func (s *Service) Addr() string { return s.srv.Addr() }

// Notifications returns the channel of received notifications.
func (s *Service) Notifications() <-chan Notification { return s.buf.ch }

// Stats returns the notification counters.
func (s *Service) Stats() Stats {
	st := s.srv.Stats()
	return Stats{
		Received: st.Delivered, Duplicates: st.Duplicates, Refused: st.Refused,
		Forged: st.Forged, Invalid: st.Invalid, StatusDenied: st.StatusDenied,
		Sent: s.sent.Load(), SendFailed: s.fail.Load(), NotSent: s.skip.Load(),
	}
}

// handler is the Service as host/control sees it.
type handler Service

func (h *handler) Descriptor() ([]byte, error) { return h.src.Descriptor() }
func (h *handler) Identity() (string, uint64)  { return h.name, h.incarnation }
func (h *handler) Status() ([]byte, error)     { return h.src.Status() }
func (h *handler) Deliver(n control.Notification) error {
	return h.buf.put(Notification{From: n.From, Name: n.Name, Msg: n.Msg}, time.Now())
}

// fairBuffer is the channel of received notifications with a fair share
// of it for each sender. The senders that share it are those holding
// notifications in it and those refused for want of room in the last
// WaitMemory (they are retrying); a sender may hold at most cap/k of it,
// k being their number counting itself. A flooding peer is refused once
// over its share, so the slots the reader frees go to the others: it
// cannot starve them. A sender alone may fill the buffer. (Senders are
// told apart by name, which only a cluster secret makes trustworthy.)
//
// The reader takes from the channel directly; put learns how many it
// took from the channel's length, since only put sends and the channel
// is FIFO: the oldest entries of the ring of senders are the ones taken.
type fairBuffer struct {
	ch chan Notification

	mu      sync.Mutex
	held    map[string]int       // by sender, notifications in ch; no zero entries
	waiting map[string]time.Time // senders refused for want of room, and when; at most MaxWaiting
	ring    []string             // sender of each notification put and not yet known taken, oldest at head
	head    int
	count   int
}

// WaitMemory is how long a sender refused for want of room keeps its
// share: longer than control.DefaultRetry's backoff between two calls.
const WaitMemory = 2 * time.Second

// MaxWaiting bounds the refused senders a buffer remembers.
const MaxWaiting = 256

func newFairBuffer(n int) fairBuffer {
	// A reader may take one between the reconciling and the send of a
	// put, so the ring can hold one more than the channel.
	return fairBuffer{ch: make(chan Notification, n), held: make(map[string]int),
		waiting: make(map[string]time.Time), ring: make([]string, n+1)}
}

// put hands n to the reader or returns why not now, wrapping
// control.ErrFull; now is the time, for WaitMemory.
func (f *fairBuffer) put(n Notification, now time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for taken := f.count - len(f.ch); taken > 0; taken-- {
		from := f.ring[f.head]
		f.ring[f.head] = ""
		f.head = (f.head + 1) % len(f.ring)
		f.count--
		if f.held[from]--; f.held[from] <= 0 {
			delete(f.held, from)
		}
	}
	senders := len(f.held)
	for w, at := range f.waiting {
		switch {
		case now.Sub(at) > WaitMemory:
			delete(f.waiting, w)
		case f.held[w] == 0 && w != n.From:
			senders++
		}
	}
	if f.held[n.From] == 0 {
		senders++
	}
	share := max(cap(f.ch)/senders, 1)
	if h := f.held[n.From]; h >= share {
		return fmt.Errorf("%w: sender %q holds %d of the notifications waiting to be read, its fair share of %d with %d senders", control.ErrFull, n.From, h, cap(f.ch), senders)
	}
	select {
	case f.ch <- n:
	default:
		if _, ok := f.waiting[n.From]; ok || len(f.waiting) < MaxWaiting {
			f.waiting[n.From] = now
		}
		return control.ErrFull
	}
	delete(f.waiting, n.From)
	f.ring[(f.head+f.count)%len(f.ring)] = n.From
	f.count++
	f.held[n.From]++
	return nil
}

// Client returns the cached client for a peer's control service.
func (s *Service) Client(addr string) (*control.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.clients == nil {
		return nil, ErrClosed
	}
	if s.used == nil {
		s.used = make(map[string]time.Time)
	}
	s.used[addr] = time.Now()
	if c := s.clients[addr]; c != nil {
		return c, nil
	}
	c, err := control.DialOptions(addr, control.Options{Secret: s.secret})
	if err != nil {
		return nil, err
	}
	s.clients[addr] = c
	return c, nil
}

// PeerDescriptor fetches the descriptor the control service at addr
// serves: how a segment is opened in peer-to-peer mode.
func (s *Service) PeerDescriptor(ctx context.Context, addr string) ([]byte, error) {
	c, err := s.Client(addr)
	if err != nil {
		return nil, err
	}
	return c.Descriptor(ctx)
}

// PruneWhile prunes (Prune) the clients of addresses that live, asked
// each time, does not return, idle for longer than idle: whenever
// changed's channel fires (the peers changed) and every idle, until
// quit is closed. Its caller owns the goroutine it runs in.
func (s *Service) PruneWhile(quit <-chan struct{}, changed func() <-chan struct{}, live func() map[string]bool, idle time.Duration) {
	tick := time.NewTicker(idle)
	defer tick.Stop()
	for {
		select {
		case <-quit:
			return
		case <-changed():
		case <-tick.C:
		}
		keep := live()
		s.Prune(func(addr string) bool { return keep[addr] }, idle)
	}
}

// Prune closes the cached clients of the addresses keep says no peer
// uses any more (a peer that restarted listens on another port) and
// that nobody asked for within idle, so that each peer restart leaves
// no connection and no goroutine behind. A client pruned under a caller
// fails that call; the caller's next Client dials again.
func (s *Service) Prune(keep func(addr string) bool, idle time.Duration) int {
	s.mu.Lock()
	var gone []*control.Client
	now := time.Now()
	for addr, c := range s.clients {
		if keep(addr) || now.Sub(s.used[addr]) < idle {
			continue
		}
		gone = append(gone, c)
		delete(s.clients, addr)
		delete(s.used, addr)
	}
	s.mu.Unlock()
	for _, c := range gone {
		c.Close()
	}
	return len(gone)
}

// NextKey returns a fresh idempotency key: 128 random bits in hex, so
// that nobody can predict a key and send it first (the receiver would
// then take the real notification for a duplicate).
func (s *Service) NextKey() string {
	var b [16]byte
	rand.Read(b[:]) // never fails: crypto/rand panics rather than return an error
	return hex.EncodeToString(b[:])
}

// Send sends n to t under key and returns once the peer took it; a call
// that fails on the way is retried (control.DefaultRetry) under the same
// key, so the peer delivers it exactly once.
func (s *Service) Send(ctx context.Context, t Target, n Notification, key string) error {
	c, err := s.Client(t.Control)
	if err != nil {
		return err
	}
	_, err = c.Notify(ctx, control.Notification{
		From: s.name, FromIncarnation: s.incarnation, ToIncarnation: t.Incarnation,
		Name: n.Name, Msg: n.Msg, Key: key,
	}, control.DefaultRetry)
	if err != nil {
		s.fail.Add(1)
		return fmt.Errorf("%w: notify segment %q: %w", ErrUnreachable, t.Name, err)
	}
	s.sent.Add(1)
	return nil
}

// Pend records a submission, tasks [start, end) of b, whose notification
// goes to targets once every task completed.
func (s *Service) Pend(b *progress.Batch, start, end int, n Notification, targets []Target) error {
	p := &pending{b: b, start: start, end: end, n: n, key: s.NextKey(), targets: targets}
	s.mu.Lock()
	if s.clients == nil { // closed meanwhile
		s.mu.Unlock()
		return ErrClosed
	}
	s.pending = append(s.pending, p)
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return nil
}

// settler settles pending submissions as their tasks end. Batches wake
// only their waiter, so it polls, and only while any are pending.
func (s *Service) settler() {
	defer s.wg.Done()
	t := time.NewTicker(Poll)
	defer t.Stop()
	for {
		s.mu.Lock()
		idle := len(s.pending) == 0
		s.mu.Unlock()
		if idle {
			select {
			case <-s.kick:
			case <-s.ctx.Done():
				return
			}
		}
		select {
		case <-t.C:
		case <-s.ctx.Done():
			return
		}
		s.Settle(nil)
	}
}

// Settle decides every pending submission whose tasks all ended (of
// batch b only, when b is not nil): send, or not. The engine calls it
// for a batch after canceling it and before the batch can be reused, so
// a submission is always decided on its own tasks.
func (s *Service) Settle(b *progress.Batch) {
	var now int64 // read for the first submission looked at: most batches have none
	s.mu.Lock()
	defer s.mu.Unlock()
	keep := s.pending[:0]
	for _, p := range s.pending {
		if b != nil && p.b != b {
			keep = append(keep, p)
			continue
		}
		if now == 0 {
			now = progress.Now()
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
		case !completed || s.ctx.Err() != nil || s.closing:
			s.skip.Add(1)
		default:
			s.sends.Add(1)
			go s.sendAll(p)
		}
	}
	clear(s.pending[len(keep):])
	s.pending = keep
}

func (s *Service) sendAll(p *pending) {
	defer s.sends.Done()
	for _, t := range p.targets {
		if err := s.Send(s.ctx, t, p.n, p.key); err != nil {
			if s.ctx.Err() != nil {
				s.log.Warn("notification canceled by the engine's Close: its send outlasted the close's grace; the peer may not have it", "segment", t.Name, "name", p.n.Name, "grace", closeGrace, "error", err)
				continue
			}
			s.log.Error("notification not delivered", "segment", t.Name, "name", p.n.Name, "error", err)
		}
	}
}

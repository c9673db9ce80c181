package control

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	controlv1 "github.com/ferrydev/ferry/host/control/proto/control/v1"
)

// MaxMessage bounds a notification's message, so that nobody mistakes the
// control service for a data path.
const MaxMessage = 64 << 10

// DedupKeys is how many delivered keys a server remembers. A retry of a
// notification older than the last DedupKeys delivered ones would be
// delivered again; senders retry within seconds, far inside that window.
const DedupKeys = 1 << 16

// MaxName bounds a notification's sender (From) and name, and MaxKey its
// idempotency key, in bytes: a server refuses longer ones before it
// remembers anything of them, so the DedupKeys remembered keys hold at
// most about DedupKeys*(MaxName+MaxKey) bytes of strings.
const (
	MaxName = 256
	MaxKey  = 64
)

// MaxAnswer bounds what a client reads from a peer's answer: a
// descriptor (4 MiB at most, as its readers cap it) or a status, with
// room for framing. A longer answer is refused by gRPC before it is kept.
// A peer's name in Ping is bounded by MaxName.
const MaxAnswer = 4<<20 + 64<<10

// ReplayWindow is how far a signed request's time may be from the
// receiver's clock (either way). With a cluster secret a server refuses a
// notification or status request outside it, so a recorded request cannot
// be replayed later; inside it, the key's deduplication makes a replayed
// notification a duplicate. It covers DefaultRetry's calls and a modest
// clock skew between hosts.
const ReplayWindow = 2 * time.Minute

// ErrFull is what Handler.Deliver returns when it cannot take a
// notification now. The server answers ResourceExhausted and does not
// remember the key, so the sender's retry may deliver it later.
var ErrFull = errors.New("notification buffer full")

// Notification is one notification on the wire.
type Notification struct {
	From            string // the sender's segment name
	FromIncarnation uint64
	// ToIncarnation, when not 0, is the receiver's incarnation the sender
	// knows; a receiver in another life refuses the notification.
	ToIncarnation uint64
	Name          string
	Msg           []byte
	// Key identifies the notification for deduplication: unique per
	// sender incarnation (host/notify draws 128 random bits), reused by
	// every retry of the notification.
	Key string
	// Sent is when the sender first sent it; every retry carries the same
	// time. A Client sets it when it is zero.
	Sent time.Time
}

// Handler is what a server needs from its engine.
type Handler interface {
	// Descriptor returns the engine's current descriptor JSON.
	Descriptor() ([]byte, error)
	// Identity returns the engine's name and incarnation.
	Identity() (name string, incarnation uint64)
	// Status returns the engine's plugin and rail status as JSON.
	Status() ([]byte, error)
	// Deliver hands over one notification. It must not block; it returns
	// ErrFull when it cannot take it now. It is called at most once per
	// (From, Key) while the key is remembered.
	Deliver(n Notification) error
}

// Stats counts what a server did with notifications.
type Stats struct {
	Delivered    uint64 // handed to Handler.Deliver and taken
	Duplicates   uint64 // acknowledged without delivery: the key was seen
	Refused      uint64 // refused: the handler was full, or another incarnation was addressed
	Forged       uint64 // refused: not signed with the server's secret, or outside the replay window
	Invalid      uint64 // refused: a field missing or over its bound
	StatusDenied uint64 // status requests refused: not signed with the server's secret
	PingDenied   uint64 // pings refused: not signed with the server's secret

	// Credit requests (see Granter).
	CreditGranted  uint64 // answered with a grant
	CreditForged   uint64 // refused: not signed with the server's secret, or outside the replay window
	CreditNoHandle uint64 // refused: they named another segment or incarnation of it
	CreditRefused  uint64 // refused by the Granter (a replayed sequence number)
	CreditInvalid  uint64 // refused: a field missing or over its bound

	// Fence requests (see Fencer).
	Fenced       uint64 // answered: the run is fenced here
	FenceForged  uint64 // refused: not signed with the server's secret, or outside the replay window
	FenceRefused uint64 // refused: another segment or incarnation addressed, or the Fencer refused
	FenceInvalid uint64 // refused: a field missing or over its bound
}

// Options are a server's or client's settings beyond its address.
type Options struct {
	// Secret is the cluster secret. With one, a server delivers only
	// notifications MACed under it (bound to the sender's name and
	// incarnation, the receiver's incarnation, the name, message, key
	// and time) and answers Status and Ping only to a request MACed
	// under it; a client signs what it sends. Without one nothing is
	// authenticated: anyone who reaches the service can send a
	// notification in any sender's name, read the engine's status and
	// ping it for its name and incarnation.
	Secret []byte
	// Now is the clock for the replay window; nil is time.Now.
	Now func() time.Time
	// Credit, on a server, grants receiver credit; nil answers the Credit
	// RPC Unimplemented.
	Credit Granter
	// Fence, on a server, fences a peer's plugin run in this engine's
	// plugins; nil answers the Fence RPC Unimplemented.
	Fence Fencer
	// Stage, on a server, serves peers' staged requests into and out of
	// this engine's device memory; nil answers the Stage RPC
	// Unimplemented.
	Stage Stager
}

func (o Options) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

// Server serves the control service on one listener.
type Server struct {
	h    Handler
	o    Options
	ln   net.Listener
	gs   *grpc.Server
	done chan struct{} // closed when Serve returned

	mu    sync.Mutex // serialises dedup check, delivery and record
	seen  map[dedupKey]struct{}
	order []dedupKey // ring of remembered keys, oldest at next
	next  int
	stats Stats
}

type dedupKey struct {
	from string
	inc  uint64
	key  string
}

// Listen starts a server on addr (host:port; port 0 picks one) with
// options o (see Options.Secret).
func Listen(addr string, h Handler, o Options) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("control service: listen on %q: %w", addr, err)
	}
	s := &Server{h: h, o: o, ln: ln, done: make(chan struct{}), seen: make(map[dedupKey]struct{})}
	s.gs = grpc.NewServer(grpc.MaxRecvMsgSize(MaxMessage + 4<<10))
	controlv1.RegisterControlServer(s.gs, &service{s: s})
	go func() {
		defer close(s.done)
		s.gs.Serve(ln)
	}()
	return s, nil
}

// Addr returns the address the server listens on, like "127.0.0.1:41234".
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Close stops the server: calls in flight finish (they do not block), new
// ones are refused. It returns when the serving goroutine has ended.
func (s *Server) Close() {
	stopped := make(chan struct{})
	go func() { s.gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(2 * time.Second):
		s.gs.Stop() // a client that holds its connection open
		<-stopped
	}
	<-s.done
}

// deliver applies one notification: dedup, delivery, record, all under
// s.mu so that two copies of a key racing each other deliver once.
func (s *Server) deliver(n Notification) (duplicate bool, err error) {
	k := dedupKey{n.From, n.FromIncarnation, n.Key}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.seen[k]; ok {
		s.stats.Duplicates++
		return true, nil
	}
	if err := s.h.Deliver(n); err != nil {
		s.stats.Refused++
		return false, err
	}
	s.stats.Delivered++
	if len(s.order) < DedupKeys {
		s.order = append(s.order, k)
	} else {
		delete(s.seen, s.order[s.next])
		s.order[s.next] = k
		s.next = (s.next + 1) % DedupKeys
	}
	s.seen[k] = struct{}{}
	return false, nil
}

type service struct {
	controlv1.UnimplementedControlServer
	s *Server
}

func (v *service) GetDescriptor(context.Context, *controlv1.GetDescriptorRequest) (*controlv1.GetDescriptorResponse, error) {
	b, err := v.s.h.Descriptor()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "descriptor: %v", err)
	}
	return &controlv1.GetDescriptorResponse{Descriptor_: b}, nil
}

func (v *service) Status(_ context.Context, r *controlv1.StatusRequest) (*controlv1.StatusResponse, error) {
	if v.s.o.Secret != nil {
		sent := r.GetSentUnixNano()
		if err := v.s.inWindow(sent); err != nil || !hmac.Equal(r.GetMac(), statusMAC(v.s.o.Secret, sent)) {
			v.s.count(&v.s.stats.StatusDenied)
			// The refusal names nothing of the engine: a caller without
			// the secret learns neither its name nor its incarnation.
			return nil, status.Errorf(codes.Unauthenticated, "status: the request is not signed with this engine's cluster secret (or its time is more than %v off); call it with the engine's cluster secret (control.DialOptions with Options.Secret)", ReplayWindow)
		}
	}
	b, err := v.s.h.Status()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "status: %v", err)
	}
	return &controlv1.StatusResponse{Status: b}, nil
}

func (v *service) Ping(_ context.Context, r *controlv1.PingRequest) (*controlv1.PingResponse, error) {
	if v.s.o.Secret != nil {
		sent := r.GetSentUnixNano()
		if err := v.s.inWindow(sent); err != nil || !hmac.Equal(r.GetMac(), pingMAC(v.s.o.Secret, sent)) {
			v.s.count(&v.s.stats.PingDenied)
			return nil, status.Errorf(codes.Unauthenticated, "ping: the request is not signed with this engine's cluster secret (or its time is more than %v off); call it with the engine's cluster secret (control.DialOptions with Options.Secret)", ReplayWindow)
		}
	}
	name, inc := v.s.h.Identity()
	return &controlv1.PingResponse{Name: name, Incarnation: inc}, nil
}

// count adds one to a counter of s.stats.
func (s *Server) count(c *uint64) {
	s.mu.Lock()
	*c++
	s.mu.Unlock()
}

// inWindow says why a signed request sent at sent (Unix nanoseconds) is
// outside the replay window, or nil.
func (s *Server) inWindow(sent int64) error {
	d := s.o.now().Sub(time.Unix(0, sent))
	if d > ReplayWindow || d < -ReplayWindow {
		return fmt.Errorf("sent %v from this engine's clock, outside the %v replay window", d, ReplayWindow)
	}
	return nil
}

func (v *service) Notify(_ context.Context, r *controlv1.NotifyRequest) (*controlv1.NotifyResponse, error) {
	if err := checkBounds(r); err != nil {
		v.s.count(&v.s.stats.Invalid)
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	name, inc := v.s.h.Identity()
	n := Notification{
		From: r.GetFrom(), FromIncarnation: r.GetFromIncarnation(), ToIncarnation: r.GetToIncarnation(),
		Name: r.GetName(), Msg: r.GetMsg(), Key: r.GetKey(), Sent: time.Unix(0, r.GetSentUnixNano()),
	}
	if v.s.o.Secret != nil {
		err := v.s.inWindow(r.GetSentUnixNano())
		if err == nil && (len(r.GetMac()) == 0 || !hmac.Equal(r.GetMac(), notifyMAC(v.s.o.Secret, &n))) {
			err = errors.New("its MAC does not verify with this engine's cluster secret (unsigned, another secret, or altered)")
		}
		if err == nil && n.ToIncarnation == 0 {
			err = errors.New("it names no receiver incarnation")
		}
		if err != nil {
			v.s.count(&v.s.stats.Forged)
			return nil, status.Errorf(codes.Unauthenticated, "notify %q: refused a notification claiming to be from %q: %v; every engine of the cluster needs the same cluster_secret", name, n.From, err)
		}
	}
	if to := r.GetToIncarnation(); to != 0 && to != inc {
		v.s.count(&v.s.stats.Refused)
		return nil, status.Errorf(codes.FailedPrecondition, "notify: addressed to incarnation %#x of %q, this is %#x: the engine restarted", to, name, inc)
	}
	dup, err := v.s.deliver(n)
	if errors.Is(err, ErrFull) {
		return nil, status.Errorf(codes.ResourceExhausted, "notify: %q: %v; retry later", name, err)
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "notify: %v", err)
	}
	return &controlv1.NotifyResponse{Duplicate: dup}, nil
}

// checkBounds refuses a notification with a required field missing or a
// field over its bound, before anything of it is kept.
func checkBounds(r *controlv1.NotifyRequest) error {
	switch {
	case r.GetFrom() == "" || r.GetKey() == "" || r.GetName() == "":
		return errors.New("notify: from, name and key are required")
	case len(r.GetMsg()) > MaxMessage:
		return fmt.Errorf("notify: message of %d bytes is over the %d-byte limit; move data through a transfer", len(r.GetMsg()), MaxMessage)
	case len(r.GetFrom()) > MaxName:
		return fmt.Errorf("notify: sender name of %d bytes is over the %d-byte limit", len(r.GetFrom()), MaxName)
	case len(r.GetName()) > MaxName:
		return fmt.Errorf("notify: notification name of %d bytes is over the %d-byte limit", len(r.GetName()), MaxName)
	case len(r.GetKey()) > MaxKey:
		return fmt.Errorf("notify: idempotency key of %d bytes is over the %d-byte limit", len(r.GetKey()), MaxKey)
	}
	return nil
}

// notifyMAC is HMAC-SHA256 under secret over a domain label and every
// field of n, each length-prefixed (strings and bytes) or fixed-width
// (numbers, big-endian), so that no two notifications encode alike.
func notifyMAC(secret []byte, n *Notification) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("ferry control notify v1\x00"))
	writeField(m, []byte(n.From))
	writeUint(m, n.FromIncarnation)
	writeUint(m, n.ToIncarnation)
	writeField(m, []byte(n.Name))
	writeField(m, n.Msg)
	writeField(m, []byte(n.Key))
	writeUint(m, uint64(n.Sent.UnixNano()))
	return m.Sum(nil)
}

// statusMAC is HMAC-SHA256 under secret over a domain label and the
// request's time.
func statusMAC(secret []byte, sent int64) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("ferry control status v1\x00"))
	writeUint(m, uint64(sent))
	return m.Sum(nil)
}

// pingMAC is HMAC-SHA256 under secret over a domain label of its own
// (a status request's MAC is no ping's) and the request's time.
func pingMAC(secret []byte, sent int64) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("ferry control ping v1\x00"))
	writeUint(m, uint64(sent))
	return m.Sum(nil)
}

func writeUint(h hash.Hash, v uint64) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	h.Write(b[:])
}

func writeField(h hash.Hash, b []byte) {
	writeUint(h, uint64(len(b)))
	h.Write(b)
}

// Client calls one peer's control service.
type Client struct {
	addr string
	o    Options
	cc   *grpc.ClientConn
	c    controlv1.ControlClient
}

// Dial returns a client for the service at addr with no secret. It does
// not connect until the first call. opts are added to the defaults (tests
// use them).
func Dial(addr string, opts ...grpc.DialOption) (*Client, error) {
	return DialOptions(addr, Options{}, opts...)
}

// DialOptions is Dial with options: with o.Secret the client signs its
// notifications and status requests.
func DialOptions(addr string, o Options, opts ...grpc.DialOption) (*Client, error) {
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxAnswer))}, opts...)
	target := "passthrough:///" + addr
	cc, err := grpc.NewClient(target, append(opts, grpc.WithChainUnaryInterceptor(redialOnce(target, opts)))...)
	if err != nil {
		return nil, fmt.Errorf("control service %s: %w", addr, err)
	}
	return &Client{addr: addr, o: o, cc: cc, c: controlv1.NewControlClient(cc)}, nil
}

// redialOnce retries, once and on a fresh connection, a call that failed
// Unavailable. One client serves every call to a peer (descriptor reads,
// pings, notifications, credit), so a call that failed while the peer
// restarted leaves its connection backing off (a second at first), and
// gRPC fails the calls made meanwhile at once with that old error: a
// descriptor re-read right after the peer came back would then say the
// peer is down. A fresh connection dials now, and fails as fast if the
// peer is still gone. Credit asks are not retried: each carries a request
// number the receiver takes only once, and the keeper asks again on its
// next round.
func redialOnce(target string, opts []grpc.DialOption) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, callOpts...)
		if err == nil || method == controlv1.Control_Credit_FullMethodName || status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			return err
		}
		cc.ResetConnectBackoff() // for the calls after this one
		fresh, ferr := grpc.NewClient(target, opts...)
		if ferr != nil {
			return err
		}
		defer fresh.Close()
		return fresh.Invoke(ctx, method, req, reply, callOpts...)
	}
}

// Addr returns the address the client calls.
func (c *Client) Addr() string { return c.addr }

// Close closes the connection.
func (c *Client) Close() error { return c.cc.Close() }

// Descriptor fetches the peer's descriptor JSON.
func (c *Client) Descriptor(ctx context.Context) ([]byte, error) {
	r, err := c.c.GetDescriptor(ctx, &controlv1.GetDescriptorRequest{})
	if err != nil {
		return nil, fmt.Errorf("control service %s: get descriptor: %w", c.addr, err)
	}
	return r.GetDescriptor_(), nil
}

// Status fetches the engine's plugin and rail status JSON.
func (c *Client) Status(ctx context.Context) ([]byte, error) {
	req := &controlv1.StatusRequest{}
	if c.o.Secret != nil {
		req.SentUnixNano = c.o.now().UnixNano()
		req.Mac = statusMAC(c.o.Secret, req.SentUnixNano)
	}
	r, err := c.c.Status(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("control service %s: status: %w", c.addr, err)
	}
	return r.GetStatus(), nil
}

// Ping returns the peer's name and incarnation. A peer with a cluster
// secret answers only a client with the same secret (DialOptions).
func (c *Client) Ping(ctx context.Context) (name string, incarnation uint64, err error) {
	req := &controlv1.PingRequest{}
	if c.o.Secret != nil {
		req.SentUnixNano = c.o.now().UnixNano()
		req.Mac = pingMAC(c.o.Secret, req.SentUnixNano)
	}
	r, err := c.c.Ping(ctx, req)
	if err != nil {
		return "", 0, fmt.Errorf("control service %s: ping: %w", c.addr, err)
	}
	if len(r.GetName()) > MaxName {
		return "", 0, fmt.Errorf("control service %s: ping: the peer's name is %d bytes, over the cap of %d: it is not a Ferry engine", c.addr, len(r.GetName()), MaxName)
	}
	return r.GetName(), r.GetIncarnation(), nil
}

// NotifyOnce makes one Notify call. A zero n.Sent is taken as now.
func (c *Client) NotifyOnce(ctx context.Context, n Notification) (duplicate bool, err error) {
	if n.Sent.IsZero() {
		n.Sent = c.o.now()
	}
	req := &controlv1.NotifyRequest{
		From: n.From, FromIncarnation: n.FromIncarnation, ToIncarnation: n.ToIncarnation,
		Name: n.Name, Msg: n.Msg, Key: n.Key, SentUnixNano: n.Sent.UnixNano(),
	}
	if c.o.Secret != nil {
		req.Mac = notifyMAC(c.o.Secret, &n)
	}
	r, err := c.c.Notify(ctx, req)
	if err != nil {
		return false, fmt.Errorf("control service %s: notify %q: %w", c.addr, n.Name, err)
	}
	return r.GetDuplicate(), nil
}

// Retry bounds how a notification is retried.
type Retry struct {
	Attempts int           // calls in all, at least 1
	Timeout  time.Duration // per call
	Backoff  time.Duration // before the second call; doubled after each
}

// DefaultRetry is what the engine uses: four calls over about a second
// and a half of backoff.
var DefaultRetry = Retry{Attempts: 4, Timeout: 5 * time.Second, Backoff: 100 * time.Millisecond}

// Notify delivers n, retrying under p while the failure may be passing (the
// peer unreachable, a call timed out, the peer's buffer full). Every retry
// carries n.Key, so the receiver delivers it once however many calls
// reached it. It returns how many calls it made.
func (c *Client) Notify(ctx context.Context, n Notification, p Retry) (calls int, err error) {
	if n.Sent.IsZero() {
		n.Sent = c.o.now() // one time for every retry, so each carries the same MAC
	}
	wait := p.Backoff
	for calls = 1; ; calls++ {
		cctx, cancel := context.WithTimeout(ctx, p.Timeout)
		_, err = c.NotifyOnce(cctx, n)
		cancel()
		if err == nil || calls >= p.Attempts || !Retryable(err) || ctx.Err() != nil {
			return calls, err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return calls, errors.Join(err, ctx.Err())
		}
		wait *= 2
	}
}

// Retryable reports whether a failed call may succeed if repeated.
func Retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted:
		return true
	}
	return false
}

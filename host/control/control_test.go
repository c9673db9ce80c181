package control_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ferrydev/ferry/host/control"
	controlv1 "github.com/ferrydev/ferry/host/control/proto/control/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type handler struct {
	mu   sync.Mutex
	got  []control.Notification
	full bool
}

func (h *handler) Descriptor() ([]byte, error) { return []byte(`{"schema":1}`), nil }
func (h *handler) Identity() (string, uint64)  { return "engine-b", 7 }
func (h *handler) Status() ([]byte, error)     { return []byte(`{"plugins":[]}`), nil }
func (h *handler) Deliver(n control.Notification) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.full {
		return control.ErrFull
	}
	h.got = append(h.got, n)
	return nil
}
func (h *handler) delivered() []control.Notification {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]control.Notification(nil), h.got...)
}

func start(t *testing.T, h control.Handler, opts ...grpc.DialOption) (*control.Server, *control.Client) {
	t.Helper()
	s, err := control.Listen("127.0.0.1:0", h, control.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	c, err := control.Dial(s.Addr(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return s, c
}

func TestDescriptorAndPing(t *testing.T) {
	_, c := start(t, &handler{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := c.Descriptor(ctx)
	if err != nil || string(d) != `{"schema":1}` {
		t.Fatalf("Descriptor = %q, %v", d, err)
	}
	name, inc, err := c.Ping(ctx)
	if err != nil || name != "engine-b" || inc != 7 {
		t.Fatalf("Ping = %q, %d, %v", name, inc, err)
	}
}

func TestNotifyDedup(t *testing.T) {
	h := &handler{}
	s, c := start(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := control.Notification{From: "a", FromIncarnation: 1, ToIncarnation: 7, Name: "block", Msg: []byte("42"), Key: "1-1"}
	for i, wantDup := range []bool{false, true, true} {
		dup, err := c.NotifyOnce(ctx, n)
		if err != nil || dup != wantDup {
			t.Fatalf("call %d: duplicate = %v, %v; want %v", i, dup, err, wantDup)
		}
	}
	// The same key from another sender is another notification.
	n2 := n
	n2.From = "c"
	if dup, err := c.NotifyOnce(ctx, n2); err != nil || dup {
		t.Fatalf("other sender: duplicate = %v, %v", dup, err)
	}
	if got := h.delivered(); len(got) != 2 || got[0].Name != "block" || string(got[0].Msg) != "42" {
		t.Fatalf("delivered %+v", got)
	}
	if st := s.Stats(); st.Delivered != 2 || st.Duplicates != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// lossyReplies fails the first n Notify calls after they reached the
// server: the reply is lost, as when a connection drops mid-call.
func lossyReplies(n int) grpc.UnaryClientInterceptor {
	var mu sync.Mutex
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		mu.Lock()
		defer mu.Unlock()
		if err == nil && n > 0 {
			n--
			return status.Error(codes.Unavailable, "reply lost")
		}
		return err
	}
}

func TestRetriedNotificationDeliveredOnce(t *testing.T) {
	h := &handler{}
	_, c := start(t, h, grpc.WithUnaryInterceptor(lossyReplies(2)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := control.Notification{From: "a", FromIncarnation: 1, Name: "done", Key: "1-9"}
	calls, err := c.Notify(ctx, n, control.Retry{Attempts: 4, Timeout: time.Second, Backoff: time.Millisecond})
	if err != nil || calls != 3 {
		t.Fatalf("Notify: %d calls, %v; want 3 calls, nil", calls, err)
	}
	if got := h.delivered(); len(got) != 1 {
		t.Fatalf("delivered %d times, want once", len(got))
	}
}

func TestNotifyRefusals(t *testing.T) {
	h := &handler{full: true}
	s, c := start(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := control.Notification{From: "a", FromIncarnation: 1, Name: "x", Key: "k"}
	calls, err := c.Notify(ctx, n, control.Retry{Attempts: 3, Timeout: time.Second, Backoff: time.Millisecond})
	if status.Code(err) != codes.ResourceExhausted || calls != 3 {
		t.Fatalf("full: %d calls, %v", calls, err)
	}
	// A refused key is not remembered: once there is room it is delivered.
	h.mu.Lock()
	h.full = false
	h.mu.Unlock()
	if dup, err := c.NotifyOnce(ctx, n); err != nil || dup {
		t.Fatalf("after room: duplicate = %v, %v", dup, err)
	}
	stale := n
	stale.Key, stale.ToIncarnation = "k2", 6
	calls, err = c.Notify(ctx, stale, control.DefaultRetry)
	if status.Code(err) != codes.FailedPrecondition || calls != 1 {
		t.Fatalf("other incarnation: %d calls, %v; want one call refused", calls, err)
	}
	bad := n
	bad.Key = ""
	if _, err := c.NotifyOnce(ctx, bad); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("no key: %v", err)
	}
	big := n
	big.Key, big.Msg = "k3", make([]byte, control.MaxMessage+1)
	if _, err := c.NotifyOnce(ctx, big); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("too large: %v", err)
	}
	if st := s.Stats(); st.Delivered != 1 || st.Refused != 4 {
		t.Fatalf("stats %+v", st)
	}
}

// startSigned starts a server with secret and clock now, and a client
// with its own secret and clock; opts go to the client.
func startSigned(t *testing.T, h control.Handler, server, client control.Options, opts ...grpc.DialOption) (*control.Server, *control.Client) {
	t.Helper()
	s, err := control.Listen("127.0.0.1:0", h, server)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	c, err := control.DialOptions(s.Addr(), client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return s, c
}

// TestSignedNotifications: with a secret, the server delivers what the
// same secret signed, within the replay window, addressed to its
// incarnation and unaltered; everything else is refused Unauthenticated
// (not retried) and counted as forged.
func TestSignedNotifications(t *testing.T) {
	secret := []byte("control-test-secret-0123456789")
	t0 := time.Unix(1_700_000_000, 0)
	server := control.Options{Secret: secret, Now: func() time.Time { return t0 }}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := control.Notification{From: "a", FromIncarnation: 1, ToIncarnation: 7, Name: "x", Msg: []byte("m"), Key: "k"}

	h := &handler{}
	s, good := startSigned(t, h, server, control.Options{Secret: secret, Now: func() time.Time { return t0.Add(-time.Minute) }})
	if dup, err := good.NotifyOnce(ctx, n); err != nil || dup {
		t.Fatalf("signed: duplicate = %v, %v", dup, err)
	}
	if got := h.delivered(); len(got) != 1 || string(got[0].Msg) != "m" || !got[0].Sent.Equal(t0.Add(-time.Minute)) {
		t.Fatalf("delivered %+v", got)
	}
	refuse := func(what string, c *control.Client, n control.Notification) {
		t.Helper()
		calls, err := c.Notify(ctx, n, control.DefaultRetry)
		if status.Code(err) != codes.Unauthenticated || calls != 1 {
			t.Fatalf("%s: %d calls, %v; want one call refused Unauthenticated", what, calls, err)
		}
	}
	unsigned := n
	unsigned.Key = "k2"
	refuse("unsigned", dialTo(t, s, control.Options{}), unsigned)
	refuse("other secret", dialTo(t, s, control.Options{Secret: []byte("another-secret-0123456789"), Now: server.Now}), unsigned)
	late := dialTo(t, s, control.Options{Secret: secret, Now: func() time.Time { return t0.Add(-control.ReplayWindow - time.Second) }})
	refuse("before the window", late, unsigned)
	early := dialTo(t, s, control.Options{Secret: secret, Now: func() time.Time { return t0.Add(control.ReplayWindow + time.Second) }})
	refuse("after the window", early, unsigned)
	noTo := unsigned
	noTo.ToIncarnation = 0
	refuse("no receiver incarnation", good, noTo)
	// Altered on the way: the message changes after it was signed.
	alter := grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if r, ok := req.(*controlv1.NotifyRequest); ok {
			r.Msg = []byte("forged")
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	refuse("altered", dialTo(t, s, control.Options{Secret: secret, Now: server.Now}, alter), unsigned)
	if st := s.Stats(); st.Delivered != 1 || st.Forged != 6 {
		t.Fatalf("stats %+v, want 1 delivered and 6 forged", st)
	}
	if len(h.delivered()) != 1 {
		t.Fatalf("delivered %+v", h.delivered())
	}
}

func dialTo(t *testing.T, s *control.Server, o control.Options, opts ...grpc.DialOption) *control.Client {
	t.Helper()
	c, err := control.DialOptions(s.Addr(), o, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestStatusNeedsSecret: with a secret, Status answers only a request
// signed with it inside the replay window.
func TestStatusNeedsSecret(t *testing.T) {
	secret := []byte("control-test-secret-0123456789")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, good := startSigned(t, &handler{}, control.Options{Secret: secret}, control.Options{Secret: secret})
	if b, err := good.Status(ctx); err != nil || string(b) != `{"plugins":[]}` {
		t.Fatalf("signed: %s, %v", b, err)
	}
	for what, o := range map[string]control.Options{
		"unsigned":     {},
		"other secret": {Secret: []byte("another-secret-0123456789")},
		"stale":        {Secret: secret, Now: func() time.Time { return time.Now().Add(-control.ReplayWindow - time.Minute) }},
	} {
		if b, err := dialTo(t, s, o).Status(ctx); status.Code(err) != codes.Unauthenticated || b != nil {
			t.Fatalf("%s: %q, %v; want Unauthenticated", what, b, err)
		}
	}
	if st := s.Stats(); st.StatusDenied != 3 {
		t.Fatalf("stats %+v, want 3 denied", st)
	}
}

// TestPingNeedsSecret: with a secret, Ping answers only a request signed
// with it inside the replay window; any other caller learns neither the
// engine's name nor its incarnation, not even from the refusal.
func TestPingNeedsSecret(t *testing.T) {
	secret := []byte("control-test-secret-0123456789")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, good := startSigned(t, &handler{}, control.Options{Secret: secret}, control.Options{Secret: secret})
	if name, inc, err := good.Ping(ctx); err != nil || name != "engine-b" || inc != 7 {
		t.Fatalf("signed: %q %d %v; want engine-b 7", name, inc, err)
	}
	for what, o := range map[string]control.Options{
		"unsigned":     {},
		"other secret": {Secret: []byte("another-secret-0123456789")},
		"stale":        {Secret: secret, Now: func() time.Time { return time.Now().Add(-control.ReplayWindow - time.Minute) }},
	} {
		name, inc, err := dialTo(t, s, o).Ping(ctx)
		if status.Code(err) != codes.Unauthenticated || name != "" || inc != 0 {
			t.Fatalf("%s: %q %d %v; want Unauthenticated and nothing", what, name, inc, err)
		}
		if strings.Contains(err.Error(), "engine-b") || !strings.Contains(err.Error(), "cluster secret") {
			t.Fatalf("%s: the refusal %q names the engine, or not what to do", what, err)
		}
	}
	// Nor does a refused Status name it.
	if _, err := dialTo(t, s, control.Options{}).Status(ctx); err == nil || strings.Contains(err.Error(), "engine-b") {
		t.Fatalf("unsigned status: %v", err)
	}
}

// TestPingDeniedCounted: each refused ping is counted.
func TestPingDeniedCounted(t *testing.T) {
	secret := []byte("control-test-secret-0123456789")
	s, _ := startSigned(t, &handler{}, control.Options{Secret: secret}, control.Options{Secret: secret})
	for range 2 {
		if _, _, err := dialTo(t, s, control.Options{}).Ping(t.Context()); err == nil {
			t.Fatal("an unsigned ping was answered")
		}
	}
	if st := s.Stats(); st.PingDenied != 2 {
		t.Fatalf("stats %+v, want 2 pings denied", st)
	}
}

// TestNotifyBounds: sender, name and key over their bounds are refused
// InvalidArgument, and at their bounds taken.
func TestNotifyBounds(t *testing.T) {
	h := &handler{}
	s, c := start(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	at := control.Notification{From: strings.Repeat("f", control.MaxName), Name: strings.Repeat("n", control.MaxName), Key: strings.Repeat("k", control.MaxKey)}
	if _, err := c.NotifyOnce(ctx, at); err != nil {
		t.Fatalf("at the bounds: %v", err)
	}
	for what, n := range map[string]control.Notification{
		"from": {From: at.From + "f", Name: "n", Key: "k"},
		"name": {From: "f", Name: at.Name + "n", Key: "k"},
		"key":  {From: "f", Name: "n", Key: at.Key + "k"},
	} {
		if _, err := c.NotifyOnce(ctx, n); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("%s one over: %v; want InvalidArgument", what, err)
		}
	}
	if st := s.Stats(); st.Delivered != 1 || st.Invalid != 3 {
		t.Fatalf("stats %+v", st)
	}
}

// bloated is a peer whose answers are as large as it likes.
type bloated struct {
	handler
	desc, status int
	name         string
}

func (b *bloated) Descriptor() ([]byte, error) { return make([]byte, b.desc), nil }
func (b *bloated) Status() ([]byte, error)     { return make([]byte, b.status), nil }
func (b *bloated) Identity() (string, uint64)  { return b.name, 7 }

// A client reads no answer past its cap: a descriptor or status over
// MaxAnswer and a name over MaxName are refused with an error that says
// so; at the caps they are read.
func TestClientAnswersCapped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	at := &bloated{desc: 4 << 20, status: 4 << 20, name: strings.Repeat("n", control.MaxName)}
	_, c := start(t, at)
	if d, err := c.Descriptor(ctx); err != nil || len(d) != 4<<20 {
		t.Fatalf("a 4 MiB descriptor: %d bytes, %v", len(d), err)
	}
	if s, err := c.Status(ctx); err != nil || len(s) != 4<<20 {
		t.Fatalf("a 4 MiB status: %d bytes, %v", len(s), err)
	}
	if n, _, err := c.Ping(ctx); err != nil || len(n) != control.MaxName {
		t.Fatalf("a name at the cap: %d bytes, %v", len(n), err)
	}
	over := &bloated{desc: control.MaxAnswer + 1, status: control.MaxAnswer + 1, name: strings.Repeat("n", control.MaxName+1)}
	_, c = start(t, over)
	if _, err := c.Descriptor(ctx); err == nil || !strings.Contains(err.Error(), "larger than max") || !strings.Contains(err.Error(), "get descriptor") {
		t.Fatalf("a descriptor over the cap: %v", err)
	}
	if _, err := c.Status(ctx); err == nil || !strings.Contains(err.Error(), "larger than max") {
		t.Fatalf("a status over the cap: %v", err)
	}
	if _, _, err := c.Ping(ctx); err == nil || !strings.Contains(err.Error(), "name is 257 bytes, over the cap of 256") {
		t.Fatalf("a name over the cap: %v", err)
	}
}

// TestCallAfterPeerReturns: a client whose call failed while nothing
// listened (a peer restarting) reaches the peer on its next call once it
// listens again, rather than failing with the old error while the
// connection backs off (gRPC's first backoff is a second).
func TestCallAfterPeerReturns(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	c, err := control.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := c.Ping(ctx); err == nil {
		t.Fatal("Ping with nothing listening succeeded")
	}
	s, err := control.Listen(addr, &handler{}, control.Options{})
	if err != nil {
		t.Fatalf("listen again on %s (another process took the port meanwhile?): %v", addr, err)
	}
	defer s.Close()
	if name, _, err := c.Ping(ctx); err != nil || name != "engine-b" {
		t.Fatalf("Ping once the peer listens again = %q, %v; want engine-b", name, err)
	}
}

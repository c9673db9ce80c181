package control_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ferrydev/ferry/host/control"
	controlv1 "github.com/ferrydev/ferry/host/control/proto/control/v1"
)

// granter grants 1 MiB to every request numbered above the sender's
// last one, as host/credit's Grantor refuses replays.
type granter struct {
	mu   sync.Mutex
	last map[string]uint64
	got  []control.CreditAsk
}

func (g *granter) Grant(a control.CreditAsk) (control.CreditGrant, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if a.Seq <= g.last[a.From] {
		return control.CreditGrant{}, errors.New("replayed request")
	}
	if g.last == nil {
		g.last = map[string]uint64{}
	}
	g.last[a.From] = a.Seq
	g.got = append(g.got, a)
	return control.CreditGrant{Epoch: 7, Seq: a.Seq, Bytes: 1 << 20, Requests: 16}, nil
}

// TestCreditRefusals: credit goes only to a sender that names this
// engine's segment and incarnation (holds a handle of it), signed with
// the cluster secret inside the replay window, with a request number
// above its last; each refusal says why and is counted.
func TestCreditRefusals(t *testing.T) {
	secret := []byte("control-test-secret-0123456789")
	t0 := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return t0 }
	g := &granter{}
	s, c := startSigned(t, &handler{}, control.Options{Secret: secret, Now: clock, Credit: g}, control.Options{Secret: secret, Now: clock})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ask := control.CreditAsk{From: "a", FromIncarnation: 1, To: "engine-b", ToIncarnation: 7, Seq: 1, Drained: 10, InUse: 5, Limited: true}
	gr, err := c.Credit(ctx, ask)
	if err != nil || gr != (control.CreditGrant{Epoch: 7, Seq: 1, Bytes: 1 << 20, Requests: 16}) {
		t.Fatalf("Credit = %+v, %v", gr, err)
	}
	if got := g.got[0]; got.Drained != 10 || got.InUse != 5 || !got.Limited || got.Sent != t0.UnixNano() {
		t.Errorf("the granter saw %+v", got)
	}

	other := dialTo(t, s, control.Options{Secret: []byte("another-secret-0123456789abcdef"), Now: clock})
	unsigned := dialTo(t, s, control.Options{})
	late := dialTo(t, s, control.Options{Secret: secret, Now: func() time.Time { return t0.Add(-control.ReplayWindow - time.Second) }})
	next := ask
	next.Seq = 2
	for _, tc := range []struct {
		name string
		c    *control.Client
		a    control.CreditAsk
		code codes.Code
		text string
	}{
		{"another secret", other, next, codes.Unauthenticated, "MAC does not verify"},
		{"unsigned", unsigned, next, codes.Unauthenticated, "refused a credit request"},
		{"outside the window", late, next, codes.Unauthenticated, "replay window"},
		{"no handle: another incarnation", c, control.CreditAsk{From: "a", FromIncarnation: 1, To: "engine-b", ToIncarnation: 6, Seq: 2}, codes.FailedPrecondition, "holds no handle"},
		{"no handle: none", c, control.CreditAsk{From: "a", FromIncarnation: 1, To: "engine-b", Seq: 2}, codes.FailedPrecondition, "holds no handle"},
		{"no handle: another segment", c, control.CreditAsk{From: "a", FromIncarnation: 1, To: "engine-c", ToIncarnation: 7, Seq: 2}, codes.FailedPrecondition, "holds no handle"},
		{"replayed request", c, ask, codes.FailedPrecondition, "replayed"},
		{"no sender", c, control.CreditAsk{To: "engine-b", ToIncarnation: 7, Seq: 2}, codes.InvalidArgument, "sender name"},
	} {
		_, err := tc.c.Credit(ctx, tc.a)
		if status.Code(err) != tc.code {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.code)
			continue
		}
		if !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: err = %v, want it to say %q", tc.name, err, tc.text)
		}
	}
	if st := s.Stats(); st.CreditGranted != 1 || st.CreditForged != 3 || st.CreditNoHandle != 3 || st.CreditRefused != 1 || st.CreditInvalid != 1 {
		t.Errorf("stats %+v", st)
	}
	if len(g.got) != 1 {
		t.Errorf("the granter was called for %d requests, want 1", len(g.got))
	}
}

// TestCreditOff: an engine without a Granter answers Unimplemented.
func TestCreditOff(t *testing.T) {
	_, c := start(t, &handler{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Credit(ctx, control.CreditAsk{From: "a", To: "engine-b", ToIncarnation: 7, Seq: 1})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("err = %v, want Unimplemented", err)
	}
}

// forger answers Credit with what its function returns.
type forger struct {
	controlv1.UnimplementedControlServer
	answer func(r *controlv1.CreditRequest) *controlv1.CreditResponse
}

func (f *forger) Credit(_ context.Context, r *controlv1.CreditRequest) (*controlv1.CreditResponse, error) {
	return f.answer(r), nil
}

// TestForgedGrants: a sender refuses a grant that is unsigned, signed
// with another secret, altered, or a recorded grant replayed as the
// answer to a later request.
func TestForgedGrants(t *testing.T) {
	secret := []byte("control-test-secret-0123456789")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A genuine grant, recorded for request 1.
	var recorded *controlv1.CreditResponse
	rec := grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if r, ok := reply.(*controlv1.CreditResponse); ok && err == nil {
			recorded = copyGrant(r)
		}
		return err
	})
	_, rc := startSigned(t, &handler{}, control.Options{Secret: secret, Credit: &granter{}}, control.Options{Secret: secret}, rec)
	ask := control.CreditAsk{From: "a", FromIncarnation: 1, To: "engine-b", ToIncarnation: 7, Seq: 1}
	if _, err := rc.Credit(ctx, ask); err != nil || recorded == nil {
		t.Fatalf("genuine grant: %v", err)
	}
	for _, tc := range []struct {
		name   string
		answer func(r *controlv1.CreditRequest) *controlv1.CreditResponse
	}{
		{"unsigned", func(r *controlv1.CreditRequest) *controlv1.CreditResponse {
			return &controlv1.CreditResponse{Epoch: 7, Seq: r.Seq, Bytes: 1 << 30, Requests: 16}
		}},
		{"altered", func(r *controlv1.CreditRequest) *controlv1.CreditResponse {
			a := copyGrant(recorded)
			a.Bytes <<= 4
			return a
		}},
		{"replayed", func(r *controlv1.CreditRequest) *controlv1.CreditResponse {
			return copyGrant(recorded)
		}},
		{"replayed, renumbered", func(r *controlv1.CreditRequest) *controlv1.CreditResponse {
			a := copyGrant(recorded)
			a.Seq = r.Seq
			return a
		}},
	} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		gs := grpc.NewServer()
		controlv1.RegisterControlServer(gs, &forger{answer: tc.answer})
		go gs.Serve(ln)
		c, err := control.DialOptions(ln.Addr().String(), control.Options{Secret: secret})
		if err != nil {
			t.Fatal(err)
		}
		a := ask
		a.Seq = 2
		_, err = c.Credit(ctx, a)
		if !errors.Is(err, control.ErrForgedGrant) {
			t.Errorf("%s: err = %v, want ErrForgedGrant", tc.name, err)
		}
		c.Close()
		gs.Stop()
	}
}

func copyGrant(r *controlv1.CreditResponse) *controlv1.CreditResponse {
	return &controlv1.CreditResponse{Epoch: r.Epoch, Seq: r.Seq, Bytes: r.Bytes, Requests: r.Requests, Mac: r.Mac}
}

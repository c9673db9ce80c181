package control

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	controlv1 "github.com/ferrydev/ferry/host/control/proto/control/v1"
)

// FenceAsk is a sender's request that the receiver apply nothing more of
// what the sender's plugin run Run (of transport Transport) sent.
type FenceAsk struct {
	From            string // the sender's segment name
	FromIncarnation uint64
	// To and ToIncarnation are the receiver as the sender's handle holds
	// it: a receiver of another name or incarnation refuses the request
	// (its plugins never served that handle's connections).
	To            string
	ToIncarnation uint64
	Transport     string // the plugin, by name, whose connections are fenced
	Run           uint64 // the sender's plugin run (sdk.StartConfig.Run), never 0
	// Sent is when the request was made (unix ns); a Client sets it.
	Sent int64
}

// FenceResult is what the receiver's plugin found.
type FenceResult struct {
	Connections int  // the run's connections that were open and are fenced now
	Known       bool // the plugin ever served a connection of the run
}

// Fencer is what a server needs to fence (Options.Fence). Fence is
// called for requests that passed the server's checks (bounds, the
// receiver's name and incarnation, and with a secret the MAC and replay
// window), and returns once nothing of the run can still be applied; an
// error says why not (ErrFenceUnknownTransport, a plugin that does not
// answer, another engine's run).
type Fencer interface {
	Fence(ctx context.Context, a FenceAsk) (FenceResult, error)
}

// ErrFenceUnknownTransport is a Fencer's answer for a transport the
// receiver does not run.
var ErrFenceUnknownTransport = errors.New("no plugin of that name runs here")

// ErrFenceNotYours is a Fencer's answer for a run whose connections
// another engine opened.
var ErrFenceNotYours = errors.New("the run's connections were opened by another engine")

func (v *service) Fence(ctx context.Context, r *controlv1.FenceRequest) (*controlv1.FenceResponse, error) {
	s := v.s
	name, _ := s.h.Identity()
	if s.o.Fence == nil {
		return nil, status.Errorf(codes.Unimplemented, "fence: engine %q fences nothing (an older engine)", name)
	}
	a := FenceAsk{From: r.GetFrom(), FromIncarnation: r.GetFromIncarnation(), To: r.GetTo(), ToIncarnation: r.GetToIncarnation(),
		Transport: r.GetTransport(), Run: r.GetRun(), Sent: r.GetSentUnixNano()}
	if a.From == "" || len(a.From) > MaxName || len(a.To) > MaxName || a.Transport == "" || len(a.Transport) > MaxName || a.Run == 0 {
		s.count(&s.stats.FenceInvalid)
		return nil, status.Errorf(codes.InvalidArgument, "fence: engine %q: the request needs a sender name and a transport name of 1 to %d bytes and a run other than 0", name, MaxName)
	}
	// Another life of this engine never served the handle's connections:
	// its plugins died with it. The sender learns that the segment
	// restarted, which ends its need to fence.
	ask := peerAsk{what: "fence", asked: "asked to fence", from: a.From, to: a.To, toInc: a.ToIncarnation, sent: a.Sent, mac: r.GetMac(),
		want: func() []byte { return fenceMAC(s.o.Secret, &a) }, forged: &s.stats.FenceForged, elsewhere: &s.stats.FenceRefused}
	if err := s.checkAsk(&ask); err != nil {
		return nil, err
	}
	res, err := s.o.Fence.Fence(ctx, a)
	if err != nil {
		s.count(&s.stats.FenceRefused)
		code := codes.Unavailable
		switch {
		case errors.Is(err, ErrFenceUnknownTransport):
			code = codes.NotFound
		case errors.Is(err, ErrFenceNotYours):
			code = codes.PermissionDenied
		}
		return nil, status.Errorf(code, "fence: engine %q, plugin %q, %q's run %#x: %v", name, a.Transport, a.From, a.Run, err)
	}
	s.count(&s.stats.Fenced)
	return &controlv1.FenceResponse{Connections: uint32(max(res.Connections, 0)), Known: res.Known}, nil
}

// Fence asks the peer to fence the sender's plugin run a.Run and returns
// once the peer confirmed it. A zero a.Sent is taken as now. An error
// with codes.FailedPrecondition means the peer is another incarnation
// than a.ToIncarnation (its old life's connections are gone with it).
func (c *Client) Fence(ctx context.Context, a FenceAsk) (FenceResult, error) {
	if a.Sent == 0 {
		a.Sent = c.o.now().UnixNano()
	}
	req := &controlv1.FenceRequest{From: a.From, FromIncarnation: a.FromIncarnation, To: a.To, ToIncarnation: a.ToIncarnation,
		Transport: a.Transport, Run: a.Run, SentUnixNano: a.Sent}
	if c.o.Secret != nil {
		req.Mac = fenceMAC(c.o.Secret, &a)
	}
	r, err := c.c.Fence(ctx, req)
	if err != nil {
		return FenceResult{}, fmt.Errorf("control service %s: fence at %q: %w", c.addr, a.To, err)
	}
	return FenceResult{Connections: int(r.GetConnections()), Known: r.GetKnown()}, nil
}

// fenceMAC is HMAC-SHA256 under secret over a domain label and every
// field of a, encoded as notifyMAC encodes.
func fenceMAC(secret []byte, a *FenceAsk) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("ferry control fence v1\x00"))
	writeField(m, []byte(a.From))
	writeUint(m, a.FromIncarnation)
	writeField(m, []byte(a.To))
	writeUint(m, a.ToIncarnation)
	writeField(m, []byte(a.Transport))
	writeUint(m, a.Run)
	writeUint(m, uint64(a.Sent))
	return m.Sum(nil)
}

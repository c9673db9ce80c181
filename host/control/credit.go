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

// CreditAsk is a sender's request for a grant of receiver credit.
type CreditAsk struct {
	From            string // the sender's segment name
	FromIncarnation uint64
	// To and ToIncarnation are the receiver as the sender's handle holds
	// it: a receiver of another name or incarnation refuses the request.
	To            string
	ToIncarnation uint64
	// Seq numbers the sender's requests to this receiver (from 1); the
	// rest reports its use since the previous one.
	Seq            uint64
	Drained, InUse uint64
	Limited        bool
	// Sent is when the request was made (unix ns); a Client sets it.
	Sent int64
}

// CreditGrant is a receiver's answer: what the sender may have in flight
// from now on, in the receiver's incarnation Epoch, for request Seq.
type CreditGrant struct {
	Epoch, Seq, Bytes uint64
	Requests          uint32
}

// Granter is what a server needs to grant credit (Options.Credit). Grant
// is called for requests that passed the server's checks (bounds, the
// receiver's name and incarnation, and with a secret the MAC and replay
// window); an error refuses the request (a replayed Seq).
type Granter interface {
	Grant(a CreditAsk) (CreditGrant, error)
}

// ErrForgedGrant is what Client.Credit returns for a grant that does not
// verify: not MACed under the cluster secret, altered, or not an answer
// to the request made.
var ErrForgedGrant = errors.New("the grant does not verify with this engine's cluster secret")

func (v *service) Credit(_ context.Context, r *controlv1.CreditRequest) (*controlv1.CreditResponse, error) {
	s := v.s
	name, _ := s.h.Identity()
	if s.o.Credit == nil {
		return nil, status.Errorf(codes.Unimplemented, "credit: engine %q grants no receiver credit (credit is off in its configuration)", name)
	}
	a := CreditAsk{From: r.GetFrom(), FromIncarnation: r.GetFromIncarnation(), To: r.GetTo(), ToIncarnation: r.GetToIncarnation(),
		Seq: r.GetSeq(), Drained: r.GetDrained(), InUse: r.GetInUse(), Limited: r.GetLimited(), Sent: r.GetSentUnixNano()}
	switch {
	case a.From == "" || len(a.From) > MaxName || len(a.To) > MaxName || a.Seq == 0:
		s.count(&s.stats.CreditInvalid)
		return nil, status.Errorf(codes.InvalidArgument, "credit: engine %q: the request needs a sender name of 1 to %d bytes and a sequence number from 1", name, MaxName)
	}
	ask := peerAsk{what: "credit", asked: "asked for credit", from: a.From, to: a.To, toInc: a.ToIncarnation, sent: a.Sent, mac: r.GetMac(),
		want: func() []byte { return creditAskMAC(s.o.Secret, &a) }, forged: &s.stats.CreditForged, elsewhere: &s.stats.CreditNoHandle,
		hint: ": it holds no handle of this engine's segment (or one from before a restart); open the segment again"}
	if err := s.checkAsk(&ask); err != nil {
		return nil, err
	}
	g, err := s.o.Credit.Grant(a)
	if err != nil {
		s.count(&s.stats.CreditRefused)
		return nil, status.Errorf(codes.FailedPrecondition, "credit: engine %q refused %q's request %d: %v", name, a.From, a.Seq, err)
	}
	s.count(&s.stats.CreditGranted)
	resp := &controlv1.CreditResponse{Epoch: g.Epoch, Seq: g.Seq, Bytes: g.Bytes, Requests: g.Requests}
	if s.o.Secret != nil {
		resp.Mac = creditGrantMAC(s.o.Secret, name, &a, &g)
	}
	return resp, nil
}

// Credit asks the peer for a grant of receiver credit. With a secret the
// request is signed and the grant must verify (else ErrForgedGrant); the
// grant must answer a.Seq. A zero a.Sent is taken as now.
func (c *Client) Credit(ctx context.Context, a CreditAsk) (CreditGrant, error) {
	if a.Sent == 0 {
		a.Sent = c.o.now().UnixNano()
	}
	req := &controlv1.CreditRequest{From: a.From, FromIncarnation: a.FromIncarnation, To: a.To, ToIncarnation: a.ToIncarnation,
		Seq: a.Seq, Drained: a.Drained, InUse: a.InUse, Limited: a.Limited, SentUnixNano: a.Sent}
	if c.o.Secret != nil {
		req.Mac = creditAskMAC(c.o.Secret, &a)
	}
	r, err := c.c.Credit(ctx, req)
	if err != nil {
		return CreditGrant{}, fmt.Errorf("control service %s: credit at %q: %w", c.addr, a.To, err)
	}
	g := CreditGrant{Epoch: r.GetEpoch(), Seq: r.GetSeq(), Bytes: r.GetBytes(), Requests: r.GetRequests()}
	if c.o.Secret != nil && !hmac.Equal(r.GetMac(), creditGrantMAC(c.o.Secret, a.To, &a, &g)) {
		return CreditGrant{}, fmt.Errorf("control service %s: credit at %q: %w (unsigned, another secret, altered or replayed)", c.addr, a.To, ErrForgedGrant)
	}
	if g.Seq != a.Seq {
		return CreditGrant{}, fmt.Errorf("control service %s: credit at %q: the grant answers request %d, not %d: %w", c.addr, a.To, g.Seq, a.Seq, ErrForgedGrant)
	}
	return g, nil
}

// creditAskMAC is HMAC-SHA256 under secret over a domain label and every
// field of a, encoded as notifyMAC encodes.
func creditAskMAC(secret []byte, a *CreditAsk) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("ferry control credit ask v1\x00"))
	writeField(m, []byte(a.From))
	writeUint(m, a.FromIncarnation)
	writeField(m, []byte(a.To))
	writeUint(m, a.ToIncarnation)
	writeUint(m, a.Seq)
	writeUint(m, a.Drained)
	writeUint(m, a.InUse)
	writeUint(m, boolBit(a.Limited))
	writeUint(m, uint64(a.Sent))
	return m.Sum(nil)
}

// creditGrantMAC is HMAC-SHA256 under secret over a domain label, the
// receiver's name, the grant and the request it answers (sender, its
// incarnation and the request's time), so that a grant recorded for one
// request verifies for no other.
func creditGrantMAC(secret []byte, receiver string, a *CreditAsk, g *CreditGrant) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("ferry control credit grant v1\x00"))
	writeField(m, []byte(receiver))
	writeUint(m, g.Epoch)
	writeUint(m, g.Seq)
	writeUint(m, g.Bytes)
	writeUint(m, uint64(g.Requests))
	writeField(m, []byte(a.From))
	writeUint(m, a.FromIncarnation)
	writeUint(m, uint64(a.Sent))
	return m.Sum(nil)
}

func boolBit(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// signed checks a request MACed under the server's secret: sent inside
// the replay window, and mac equal to want's.
// peerAsk is what checkAsk checks of a peer's call: who sent it, to
// which life of which engine, when, and its MAC; what names the call in
// errors, hint ends the error of one addressed elsewhere, and forged and
// elsewhere are the call's counters of those refusals.
type peerAsk struct {
	what, asked       string // "credit", "asked for credit"
	from, to          string
	toInc             uint64
	sent              int64
	mac               []byte
	want              func() []byte
	forged, elsewhere *uint64
	hint              string
}

// checkAsk refuses a peer's call not signed with the cluster secret (when
// the engine has one) and one addressed to another engine, or to another
// life of this one (its plugins, and what they held for the peer, died
// with it).
func (s *Server) checkAsk(a *peerAsk) error {
	name, inc := s.h.Identity()
	if s.o.Secret != nil {
		if err := s.signed(a.sent, a.mac, a.want); err != nil {
			s.count(a.forged)
			return status.Errorf(codes.Unauthenticated, "%s: engine %q refused a %s request claiming to be from %q: %v; every engine of the cluster needs the same cluster_secret", a.what, name, a.what, a.from, err)
		}
	}
	if a.to != name || a.toInc == 0 || a.toInc != inc {
		s.count(a.elsewhere)
		return status.Errorf(codes.FailedPrecondition, "%s: %q %s at segment %q incarnation %#x, but this is %q incarnation %#x%s", a.what, a.from, a.asked, a.to, a.toInc, name, inc, a.hint)
	}
	return nil
}

func (s *Server) signed(sent int64, mac []byte, want func() []byte) error {
	if err := s.inWindow(sent); err != nil {
		return err
	}
	if len(mac) == 0 || !hmac.Equal(mac, want()) {
		return errors.New("its MAC does not verify with this engine's cluster secret (unsigned, another secret, or altered)")
	}
	return nil
}

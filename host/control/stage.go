package control

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	controlv1 "github.com/ferrydev/ferry/host/control/proto/control/v1"
)

// StageOp is what a Stage request asks of the receiver.
type StageOp uint32

// Stage ops.
const (
	StageReserve StageOp = 1 // reserve a slot of Length bytes
	StageLand    StageOp = 2 // copy the slot into device memory at Addr
	StageFetch   StageOp = 3 // copy device memory at Addr into a new slot
	StageRelease StageOp = 4 // give the slot back
)

func (o StageOp) String() string {
	switch o {
	case StageReserve:
		return "reserve"
	case StageLand:
		return "land"
	case StageFetch:
		return "fetch"
	case StageRelease:
		return "release"
	}
	return fmt.Sprintf("stage op %d", uint32(o))
}

// StageAsk is one Stage request.
type StageAsk struct {
	From            string
	FromIncarnation uint64
	To              string
	ToIncarnation   uint64
	Op              StageOp
	Slot            uint64 // the slot's address (land, release)
	Addr            uint64 // device memory's address (land, fetch)
	Length          uint64
	Deadline        int64 // unix ns; 0: none
	Sent            int64 // unix ns; a Client sets it
}

// Stager is what a server needs to serve Stage (Options.Stage): the
// engine's staging server (host/staging). It is called for requests that
// passed the server's checks, and returns the slot's address for reserve
// and fetch.
type Stager interface {
	Stage(ctx context.Context, a StageAsk) (slot uint64, err error)
}

// ErrStageNoDevice is a Stager's answer for an address that is not
// device memory registered there with the access asked.
var ErrStageNoDevice = errors.New("not device memory registered here")

func (v *service) Stage(ctx context.Context, r *controlv1.StageRequest) (*controlv1.StageResponse, error) {
	s := v.s
	name, _ := s.h.Identity()
	if s.o.Stage == nil {
		return nil, status.Errorf(codes.Unimplemented, "stage: engine %q stages nothing (an older engine, or one without device memory)", name)
	}
	a := StageAsk{From: r.GetFrom(), FromIncarnation: r.GetFromIncarnation(), To: r.GetTo(), ToIncarnation: r.GetToIncarnation(),
		Op: StageOp(r.GetOp()), Slot: r.GetSlot(), Addr: r.GetAddr(), Length: r.GetLength(), Deadline: r.GetDeadlineUnixNano(), Sent: r.GetSentUnixNano()}
	if a.From == "" || len(a.From) > MaxName || len(a.To) > MaxName || a.Op < StageReserve || a.Op > StageRelease {
		return nil, status.Errorf(codes.InvalidArgument, "stage: engine %q: the request needs a sender name of 1 to %d bytes and an op from 1 to 4", name, MaxName)
	}
	ask := peerAsk{what: "stage", asked: "asked to stage", from: a.From, to: a.To, toInc: a.ToIncarnation, sent: a.Sent, mac: r.GetMac(),
		want: func() []byte { return stageMAC(s.o.Secret, &a) }, forged: new(uint64), elsewhere: new(uint64)}
	if err := s.checkAsk(&ask); err != nil {
		return nil, err
	}
	if a.Deadline != 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, time.Unix(0, a.Deadline))
		defer cancel()
	}
	slot, err := s.o.Stage.Stage(ctx, a)
	if err != nil {
		code := codes.Unavailable
		switch {
		case errors.Is(err, ErrStageNoDevice):
			code = codes.InvalidArgument
		case errors.Is(err, context.DeadlineExceeded):
			code = codes.DeadlineExceeded
		}
		return nil, status.Errorf(code, "stage %s at engine %q for %q: %v", a.Op, name, a.From, err)
	}
	return &controlv1.StageResponse{Slot: slot}, nil
}

// Stage sends one Stage request and returns the slot's address the
// receiver answered (reserve, fetch).
func (c *Client) Stage(ctx context.Context, a StageAsk) (uint64, error) {
	if a.Sent == 0 {
		a.Sent = c.o.now().UnixNano()
	}
	req := &controlv1.StageRequest{From: a.From, FromIncarnation: a.FromIncarnation, To: a.To, ToIncarnation: a.ToIncarnation,
		Op: uint32(a.Op), Slot: a.Slot, Addr: a.Addr, Length: a.Length, DeadlineUnixNano: a.Deadline, SentUnixNano: a.Sent}
	if c.o.Secret != nil {
		req.Mac = stageMAC(c.o.Secret, &a)
	}
	r, err := c.c.Stage(ctx, req)
	if err != nil {
		return 0, fmt.Errorf("control service %s: stage %s at %q: %w", c.addr, a.Op, a.To, err)
	}
	return r.GetSlot(), nil
}

// stageMAC is HMAC-SHA256 under secret over a domain label and every
// field of a.
func stageMAC(secret []byte, a *StageAsk) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("ferry control stage v1\x00"))
	writeField(m, []byte(a.From))
	writeUint(m, a.FromIncarnation)
	writeField(m, []byte(a.To))
	writeUint(m, a.ToIncarnation)
	for _, v := range []uint64{uint64(a.Op), a.Slot, a.Addr, a.Length, uint64(a.Deadline), uint64(a.Sent)} {
		writeUint(m, v)
	}
	return m.Sum(nil)
}

package control_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ferrydev/ferry/host/control"
)

// fencer fences runs of plugin "tcp" only; a run it was told belongs
// to another engine is refused as the tcp plugin refuses it.
type fencer struct {
	mu     sync.Mutex
	got    []control.FenceAsk
	owners map[uint64]string
}

func (f *fencer) Fence(_ context.Context, a control.FenceAsk) (control.FenceResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if a.Transport != "tcp" {
		return control.FenceResult{}, control.ErrFenceUnknownTransport
	}
	if o, ok := f.owners[a.Run]; ok && o != a.From {
		return control.FenceResult{}, fmt.Errorf("%w (%q)", control.ErrFenceNotYours, o)
	}
	f.got = append(f.got, a)
	return control.FenceResult{Connections: 2, Known: true}, nil
}

// TestFenceRefusals: a fence is taken only from a sender that names this
// engine's segment and incarnation, signed with the cluster secret
// inside the replay window, for a plugin that runs here and a run of its
// own; each refusal says why, with its own code, and is counted.
func TestFenceRefusals(t *testing.T) {
	secret := []byte("control-test-secret-0123456789")
	t0 := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return t0 }
	f := &fencer{owners: map[uint64]string{9: "c"}}
	s, c := startSigned(t, &handler{}, control.Options{Secret: secret, Now: clock, Fence: f}, control.Options{Secret: secret, Now: clock})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ask := control.FenceAsk{From: "a", FromIncarnation: 1, To: "engine-b", ToIncarnation: 7, Transport: "tcp", Run: 5}
	r, err := c.Fence(ctx, ask)
	if err != nil || r != (control.FenceResult{Connections: 2, Known: true}) || len(f.got) != 1 || f.got[0].Run != 5 {
		t.Fatalf("Fence = %+v, %v (fencer saw %+v)", r, err, f.got)
	}

	cases := []struct {
		name string
		ask  control.FenceAsk
		c    *control.Client
		code codes.Code
	}{
		{"another incarnation", control.FenceAsk{From: "a", To: "engine-b", ToIncarnation: 8, Transport: "tcp", Run: 5}, c, codes.FailedPrecondition},
		{"another segment", control.FenceAsk{From: "a", To: "engine-x", ToIncarnation: 7, Transport: "tcp", Run: 5}, c, codes.FailedPrecondition},
		{"no run", control.FenceAsk{From: "a", To: "engine-b", ToIncarnation: 7, Transport: "tcp"}, c, codes.InvalidArgument},
		{"no sender", control.FenceAsk{To: "engine-b", ToIncarnation: 7, Transport: "tcp", Run: 5}, c, codes.InvalidArgument},
		{"a plugin not run here", control.FenceAsk{From: "a", To: "engine-b", ToIncarnation: 7, Transport: "rdma", Run: 5}, c, codes.NotFound},
		{"another engine's run", control.FenceAsk{From: "a", To: "engine-b", ToIncarnation: 7, Transport: "tcp", Run: 9}, c, codes.PermissionDenied},
		{"unsigned", control.FenceAsk{From: "a", To: "engine-b", ToIncarnation: 7, Transport: "tcp", Run: 5}, dialTo(t, s, control.Options{}), codes.Unauthenticated},
		{"outside the replay window", control.FenceAsk{From: "a", To: "engine-b", ToIncarnation: 7, Transport: "tcp", Run: 5, Sent: t0.Add(-time.Hour).UnixNano()}, c, codes.Unauthenticated},
	}
	for _, k := range cases {
		if _, err := k.c.Fence(ctx, k.ask); status.Code(err) != k.code {
			t.Errorf("%s: %v, want %s", k.name, err, k.code)
		}
	}
	if len(f.got) != 1 {
		t.Errorf("the fencer was asked %d times, want once", len(f.got))
	}
	st := s.Stats()
	if st.Fenced != 1 || st.FenceInvalid != 2 || st.FenceForged != 2 || st.FenceRefused != 4 {
		t.Errorf("stats %+v", st)
	}
}

// TestFenceOff: an engine without a Fencer answers Unimplemented.
func TestFenceOff(t *testing.T) {
	_, c := start(t, &handler{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Fence(ctx, control.FenceAsk{From: "a", To: "engine-b", ToIncarnation: 7, Transport: "tcp", Run: 1})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("err = %v, want Unimplemented", err)
	}
}

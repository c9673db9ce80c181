package host_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/admission"
	"github.com/ferrydev/ferry/host/observe"
	"github.com/ferrydev/ferry/host/observe/observetest"
)

// refuseCheckpoints is an admission stage for this test: it refuses
// checkpoint writes, holds back low-priority requests and admits the
// rest, counting the calls.
type refuseCheckpoints struct {
	calls  atomic.Int64
	noTime atomic.Bool
}

func (a *refuseCheckpoints) Admit(r admission.Request, now int64) admission.Decision {
	a.calls.Add(1)
	if now == 0 {
		a.noTime.Store(true)
	}
	switch {
	case r.Intent == host.IntentCheckpoint:
		return admission.Decision{Verdict: admission.Reject, Reason: "checkpoints are paused"}
	case r.Priority == host.PriorityLow:
		return admission.Decision{Verdict: admission.Later, Reason: "low-priority budget spent"}
	}
	return admission.Decision{Verdict: admission.Now}
}

// TestAdmissionStage puts an admitter in the path with one line of
// wiring (host.WithAdmitter) and checks that it is asked about every
// request, with the time, that what it refuses or holds back ends
// INVALID naming its reason and is never routed, and that what it admits
// is carried.
func TestAdmissionStage(t *testing.T) {
	ctx := context.Background()
	adm := &refuseCheckpoints{}
	rec := observetest.New()
	cfg := config.Default("admit-a")
	cfg.PluginDir = binDir
	e, err := host.New(ctx, cfg, host.WithAdmitter(adm), host.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	mem, err := e.Allocate(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	src, dst := mem[:512<<10], mem[512<<10:]
	if _, err := e.Register(ctx, src, host.LocalOnly); err != nil {
		t.Fatal(err)
	}
	base, err := e.Register(ctx, dst, host.RemoteReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	seg, err := e.OpenSegment(ctx, e.Name())
	if err != nil {
		t.Fatal(err)
	}
	req := host.Request{Op: host.Write, Local: src[:4096], Segment: seg.ID, Remote: base}
	if err := e.Transfer(ctx, req); err != nil {
		t.Fatalf("admitted request: %v", err)
	}
	for _, c := range []struct {
		edit func(*host.Request)
		want string
	}{
		{func(r *host.Request) { r.Intent = host.IntentCheckpoint }, "admission refused the request (checkpoints are paused)"},
		{func(r *host.Request) { r.Priority = host.PriorityLow }, "admission held the request back (low-priority budget spent)"},
	} {
		r := req
		c.edit(&r)
		err := e.Transfer(ctx, r)
		var te *host.TransferError
		if !errors.As(err, &te) || te.State != host.StateInvalid || !errors.Is(err, host.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("request %+v: %v; want INVALID saying %q", r.Intent, err, c.want)
			continue
		}
		if te.Transport != "" {
			t.Errorf("refused request was routed to %q", te.Transport)
		}
	}
	if n := adm.calls.Load(); n != 3 {
		t.Errorf("admitter asked %d times, want 3 (once per request)", n)
	}
	if adm.noTime.Load() {
		t.Error("admitter was not given the time")
	}
	sum, errs := rec.Check()
	for _, err := range errs {
		t.Error(err)
	}
	if sum.Tasks != 3 || sum.Ended["INVALID"] != 2 || sum.Ended["COMPLETED"] != 1 {
		t.Errorf("observer: %v; want 3 tasks, 2 INVALID, 1 COMPLETED", sum)
	}
	if sum.Stages[observe.Queued] != 3 || sum.Stages[observe.Admitted] != 1 || sum.Stages[observe.Routed] != 1 {
		t.Errorf("observer: %v; want 3 queued, 1 admitted and routed", sum)
	}
}

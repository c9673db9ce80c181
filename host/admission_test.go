package host_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/admission"
	"github.com/ferrydev/ferry/host/observe"
	"github.com/ferrydev/ferry/host/observe/observetest"
)

// refuseCheckpoints is an admission stage for this test: it refuses
// checkpoint writes, holds back low-priority requests for two asks and
// tenant "starved" for ever, and admits the rest, counting the calls.
type refuseCheckpoints struct {
	calls, low atomic.Int64
	noTime     atomic.Bool
}

func (a *refuseCheckpoints) Admit(r admission.Request, now int64) admission.Decision {
	a.calls.Add(1)
	if now == 0 {
		a.noTime.Store(true)
	}
	switch {
	case r.Intent == host.IntentCheckpoint:
		return admission.Decision{Verdict: admission.Reject, Reason: "checkpoints are paused"}
	case r.Tenant == "starved":
		return admission.Decision{Verdict: admission.Later, Reason: "no room for this tenant"}
	case r.Priority == host.PriorityLow && a.low.Add(1) <= 2:
		return admission.Decision{Verdict: admission.Later, Reason: "low-priority budget spent"}
	}
	return admission.Decision{Verdict: admission.Now}
}

// TestAdmissionStage puts an admitter in the path with one line of
// wiring (host.WithAdmitter) and checks that it is asked about every
// request, with the time; that what it refuses ends INVALID naming its
// reason and is never routed; that what it holds back (Later) stays
// pending and goes on once it says Now, or ends TIMEOUT at its deadline
// saying why; and that what it admits is carried.
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
	src, _, seg, base := ownSegment(t, e, 512<<10)
	req := host.Request{Op: host.Write, Local: src[:4096], Segment: seg.ID, Remote: base}
	if err := e.Transfer(ctx, req); err != nil {
		t.Fatalf("admitted request: %v", err)
	}
	refused := req
	refused.Intent = host.IntentCheckpoint
	err = e.Transfer(ctx, refused)
	var te *host.TransferError
	if !errors.As(err, &te) || te.State != host.StateInvalid || !errors.Is(err, host.ErrInvalid) || !strings.Contains(err.Error(), "admission refused the request (checkpoints are paused)") {
		t.Errorf("checkpoint: %v; want INVALID saying admission refused it", err)
	} else if te.Transport != "" {
		t.Errorf("refused request was routed to %q", te.Transport)
	}
	low := req
	low.Priority = host.PriorityLow
	if err := e.Transfer(ctx, low); err != nil {
		t.Errorf("a request held back twice, then admitted: %v", err)
	}
	if n := adm.low.Load(); n != 3 {
		t.Errorf("the held-back request was asked about %d times, want 3 (Later, Later, Now)", n)
	}
	starved := req
	starved.Tenant = "starved"
	starved.Deadline = time.Now().Add(200 * time.Millisecond)
	err = e.Transfer(ctx, starved)
	if !errors.As(err, &te) || te.State != host.StateTimeout || !errors.Is(err, host.ErrDeadlineExceeded) || !strings.Contains(err.Error(), "admission held the request back (no room for this tenant) until its deadline") {
		t.Errorf("starved: %v; want TIMEOUT saying admission held it back", err)
	} else if te.Transport != "" {
		t.Errorf("a request held back to its deadline was routed to %q", te.Transport)
	}
	if adm.noTime.Load() {
		t.Error("admitter was not given the time")
	}
	sum, errs := rec.Check()
	for _, err := range errs {
		t.Error(err)
	}
	if sum.Tasks != 4 || sum.Ended["INVALID"] != 1 || sum.Ended["COMPLETED"] != 2 || sum.Ended["TIMEOUT"] != 1 {
		t.Errorf("observer: %v; want 4 tasks, 1 INVALID, 2 COMPLETED, 1 TIMEOUT", sum)
	}
	if sum.Stages[observe.Queued] != 4 || sum.Stages[observe.Admitted] != 2 || sum.Stages[observe.Routed] != 2 {
		t.Errorf("observer: %v; want 4 queued, 2 admitted and routed", sum)
	}
}

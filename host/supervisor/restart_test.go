package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host/loader"
	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/sdk"
)

// tcpBin is the tcp plugin, built once by TestMain for the tests that need
// a real process (the restart loop); the pure parts need none.
var tcpBin string

// hookLog records the hooks' calls in order.
type hookLog struct {
	mu    sync.Mutex
	calls []string
	added chan struct{} // closed and replaced at every call recorded
}

func (h *hookLog) add(format string, args ...any) {
	h.mu.Lock()
	h.calls = append(h.calls, fmt.Sprintf(format, args...))
	if h.added != nil {
		close(h.added)
		h.added = nil
	}
	h.mu.Unlock()
}

// waitCalls waits until n calls are recorded: a hook that runs after the
// last state change (Restarted) changes no state to wait on.
func (h *hookLog) waitCalls(t *testing.T, n int) {
	t.Helper()
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	for {
		h.mu.Lock()
		if len(h.calls) >= n {
			h.mu.Unlock()
			return
		}
		if h.added == nil {
			h.added = make(chan struct{})
		}
		ch := h.added
		h.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("waiting for %d hook calls: have %q", n, h.get())
		}
	}
}

func (h *hookLog) get() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.calls...)
}

// waitFor waits on s.Changed until cond holds.
func waitFor(t *testing.T, s *Set, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for {
		ch := s.Changed()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		}
	}
}

// TestRestartAfterKill kills a real plugin process and follows the
// supervisor through the outage: the engine hears of the exit once, a
// first restart attempt whose replay fails is discarded and retried after
// the backoff, and the second one commits a new run with a new process
// and generation.
func TestRestartAfterKill(t *testing.T) {
	tracker := progress.NewTracker(0)
	s := New(Config{
		RingDepth: 64, Spin: 20 * time.Microsecond,
		Stall:   Stall{Off: true},
		Backoff: Backoff{Min: 10 * time.Millisecond, Max: 40 * time.Millisecond},
		Tracker: tracker,
	})
	defer func() { s.Stop(context.Background()); s.Close() }()
	var log hookLog
	replays := 0
	var p *Plugin
	var started atomic.Pointer[Plugin] // p, for the hooks: set once Start returns
	state := func() string {
		if q := started.Load(); q != nil {
			return q.State().GoString()
		}
		return "in Start"
	}
	// Each hook notes the plugin's state as it sees it: the order of
	// marking and calling is part of the contract.
	h := Hooks{
		Owner: func(sdk.ProbeResult) any { return nil },
		Up:    func(r *Run) { log.add("up gen %d (%v)", r.Gen, state()) },
		Down: func(r *Run, why string) {
			log.add("down gen %d (%v, lane down %v): %s", r.Gen, state(), r.Lanes[0].Down(), why)
		},
		Replay: func(ctx context.Context, r *Run, commit func() bool) error {
			replays++
			if replays == 1 {
				log.add("replay gen %d (%v): refused", r.Gen, state())
				return errors.New("injected replay failure")
			}
			log.add("replay gen %d (%v)", r.Gen, state())
			if !commit() {
				return ErrStopped
			}
			return nil
		},
		Restarted: func(ctx context.Context, r *Run) { log.add("restarted gen %d", r.Gen) },
	}
	p = s.Start(t.Context(), Spec{
		Loader: loader.Spec{Name: "tcp", Path: tcpBin},
		Start:  sdk.StartConfig{Engine: "sup-test", Incarnation: 1, MachineID: "m"},
	}, h)
	started.Store(p)
	if p.Err() != nil || p.State() != Running {
		t.Fatalf("start: state %v, err %v", p.State(), p.Err())
	}
	first := p.Run()
	if len(first.Lanes) != 1 || first.Lanes[0].Generation() != first.Gen || first.Gen != 1 {
		t.Fatalf("first run: %d lanes, generation %d (run %d); want 1 lane stamped 1", len(first.Lanes), first.Lanes[0].Generation(), first.Gen)
	}
	pid := first.Proc.PID()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, s, "the restart", func() bool { return p.Restarts() == 1 && p.State() == Running })
	r := p.Run()
	if r == first || r.Proc.PID() == pid || r.Gen != 3 || r.Lanes[0].Generation() != 3 {
		t.Fatalf("after restart: pid %d (was %d), gen %d (lane %d); want a new process, generation 3", r.Proc.PID(), pid, r.Gen, r.Lanes[0].Generation())
	}
	want := []string{
		"up gen 1 (in Start)",
		"down gen 1 (Down, lane down true): the plugin process exited (signal: killed)",
		"replay gen 2 (Restarting): refused",
		"replay gen 3 (Restarting)",
		"up gen 3 (Restarting)",
	}
	// Restarted runs after commit, outside the lock: it may come a
	// moment after the plugin shows Running.
	log.waitCalls(t, len(want)+1)
	want = append(want, "restarted gen 3")
	if got := log.get(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("hooks called\n%q\nwant\n%q", got, want)
	}
	st := p.Status(t.Context())
	if st.State != "running" || st.Restarts != 1 || st.LastExit != "the plugin process exited (signal: killed)" || st.PID != r.Proc.PID() || st.Reason != "" {
		t.Fatalf("status %+v", st)
	}
	if p.lastErr.Load() != nil {
		t.Fatalf("last error %q kept after a good restart", *p.lastErr.Load())
	}
}

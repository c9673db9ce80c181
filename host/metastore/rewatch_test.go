package metastore

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// stateUntil waits until cond holds of r's state.
func stateUntil(t *testing.T, r *Rewatch, what string, cond func(WatchState) bool) WatchState {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := r.State()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s; state %v", what, s)
		}
		time.Sleep(5 * time.Millisecond) // polling observable state
	}
}

// TestRewatchRetriesAStartThatFails is the second half of the attack that
// switched watches off: a watch that fails when the engine starts (every
// listing slot held) was never tried again. A Rewatch retries it, says
// so in its state, and once the server answers, watches, with a Resync
// first so that the receiver re-reads what it missed.
func TestRewatchRetriesAStartThatFails(t *testing.T) {
	ctx := context.Background()
	srv, err := Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for i := 0; i < cap(srv.server.listings); i++ {
		srv.server.listings <- struct{}{} // every slot held
	}
	c, err := NewHTTPClient(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.PollInterval = 20 * time.Millisecond
	if _, err := c.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	r := &Rewatch{Name: "segments", Prefix: "ferry/segments/", W: c, Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); r.Run(wctx) }()
	defer func() { cancel(); <-done }()
	s := stateUntil(t, r, "a failed start", func(s WatchState) bool { return s.Retries >= 2 })
	if s.Watching || s.Err == nil || !strings.Contains(s.Err.Error(), "503") || !strings.Contains(s.String(), "retrying since") {
		t.Fatalf("state while the slots are held: %v; want retrying, with the 503", s)
	}
	for i := 0; i < cap(srv.server.listings); i++ {
		<-srv.server.listings
	}
	stateUntil(t, r, "watching", func(s WatchState) bool { return s.Watching })
	if code, body, _ := quotaDo(t, http.MethodPut, srv.URL(), url.Values{"key": {"ferry/segments/b"}}, []byte("v")); code != http.StatusOK {
		t.Fatalf("PUT: %d %s", code, body)
	}
	want := []EventKind{Resync, Put}
	for _, k := range want {
		select {
		case ev := <-r.Events():
			if ev.Kind != k {
				t.Fatalf("event %v; want %v (a Resync after the late start, then the put)", ev, k)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no %v event within 10s", k)
		}
	}
	if s := r.State(); !s.Watching || s.Err != nil || !strings.HasPrefix(s.String(), "watching since") {
		t.Fatalf("state: %v", s)
	}
}

// flakyWatcher fails its first starts, then hands out channels the test
// closes.
type flakyWatcher struct {
	fail  int
	chans chan chan Event
}

func (f *flakyWatcher) Watch(ctx context.Context, prefix string) (<-chan Event, error) {
	if f.fail > 0 {
		f.fail--
		return nil, errors.New("metastore down")
	}
	ch := make(chan Event, 1)
	f.chans <- ch
	return ch, nil
}

// TestRewatchRestartsAWatchThatEnds: a watch whose channel closes under
// it (its store closed, or broken for good) is started again, with a
// Resync; one that starts at once sends no Resync first.
func TestRewatchRestartsAWatchThatEnds(t *testing.T) {
	f := &flakyWatcher{chans: make(chan chan Event, 2)}
	r := &Rewatch{Prefix: "p/", W: f, Min: time.Millisecond, Max: 2 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	first := <-f.chans
	first <- Event{Kind: Put, Key: "p/a"}
	if ev := <-r.Events(); ev.Kind != Put {
		t.Fatalf("first event %v; want the put (no Resync on a first start)", ev)
	}
	close(first)
	second := <-f.chans
	if ev := <-r.Events(); ev.Kind != Resync {
		t.Fatalf("after the restart: %v; want Resync", ev)
	}
	stateUntil(t, r, "watching again", func(s WatchState) bool { return s.Watching })
	_ = second
	cancel()
	<-done
	if _, ok := <-r.Events(); ok {
		t.Fatal("Events not closed after Run returned")
	}
}

package remotes

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/ferrydev/ferry/host/metastore"
	"github.com/ferrydev/ferry/host/segment"
	"github.com/ferrydev/ferry/sdk"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeTransport records the peers it has open.
type fakeTransport struct {
	name     string
	down     bool
	sameOnly bool
	refuse   bool

	mu    sync.Mutex
	peers map[uint32]sdk.Peer
}

func newTransport(name string) *fakeTransport {
	return &fakeTransport{name: name, peers: map[uint32]sdk.Peer{}}
}

func (f *fakeTransport) Name() string          { return f.name }
func (f *fakeTransport) Usable() bool          { return !f.down }
func (f *fakeTransport) SameMachineOnly() bool { return f.sameOnly }

func (f *fakeTransport) OpenPeer(_ context.Context, p sdk.Peer) error {
	if f.refuse {
		return errors.New("refused")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.peers[p.ID] = p
	return nil
}

func (f *fakeTransport) ClosePeer(_ context.Context, id uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.peers, id)
	return nil
}

func (f *fakeTransport) open(id uint32) (sdk.Peer, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.peers[id]
	return p, ok
}

func TestOpenRetireCloseReplay(t *testing.T) {
	ctx := context.Background()
	tcp, shm := newTransport("tcp"), newTransport("shm")
	shm.sameOnly = true
	ts := []Transport{tcp, shm}
	tb := New("here", time.Second)
	d := desc(7, 0x1000)
	d.MachineID = "there"
	d.Transports["shm"] = []byte("shm-ep")
	h, err := tb.Open(ctx, "b", "segments/b", d, ts)
	if err != nil {
		t.Fatal(err)
	}
	if h.ID != 1 || !h.Opened[0] || h.Opened[1] {
		t.Fatalf("opened %+v; want handle 1 through tcp only (shm is same-machine only)", h)
	}
	if p, ok := tcp.open(1); !ok || p.Incarnation != 7 || string(p.Endpoint) != "ep" {
		t.Fatalf("tcp has peer %+v, %v", p, ok)
	}
	// The same life again: the same handle, with the new descriptor.
	h2, err := tb.Open(ctx, "b", "segments/b", desc(7, 0x1000, 0x9000), ts)
	if err != nil || h2.ID != 1 || len(h2.Desc.Buffers) != 2 || tb.Get(1) != h2 {
		t.Fatalf("reopen of the same life: %+v, %v", h2, err)
	}
	// A new life: the old handle is retired and closed, a new one opens.
	h3, err := tb.Open(ctx, "b", "segments/b", desc(8, 0x2000), ts)
	if err != nil || h3.ID != 2 {
		t.Fatalf("open of the new life: %+v, %v", h3, err)
	}
	if old := tb.Get(1); !strings.Contains(old.Retired, "now incarnation 0x8") || slices.Contains(old.Opened, true) {
		t.Fatalf("old handle %+v, want it retired naming incarnation 0x8", old)
	}
	if _, ok := tcp.open(1); ok {
		t.Fatal("the retired handle's peer is still open in tcp")
	}
	// A restarted tcp gets the live handle's peer again, not the retired one.
	fresh := newTransport("tcp")
	if err := tb.Replay(ctx, 0, "tcp", fresh.OpenPeer, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := fresh.open(1); ok || len(fresh.peers) != 1 {
		t.Fatalf("replayed %v, want only handle 2", fresh.peers)
	}
	if p, _ := fresh.open(2); p.Incarnation != 8 {
		t.Fatalf("replayed peer %+v, want incarnation 8", p)
	}
	if err := tb.Close(ctx, 1, ts); err != nil {
		t.Fatal(err)
	}
	if err := tb.Close(ctx, 1, ts); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second close: %v, want ErrNotFound", err)
	}
	// The free slot is reused.
	if h4, err := tb.Open(ctx, "c", "segments/c", desc(9, 0x1000), ts); err != nil || h4.ID != 1 {
		t.Fatalf("open c: %+v, %v; want slot 1 reused", h4, err)
	}
	tcp.refuse = true
	if _, err := tb.Open(ctx, "d", "segments/d", desc(10), ts); !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "tcp: refused") {
		t.Fatalf("open with every transport refusing: %v, want ErrUnreachable naming why", err)
	}
}

// follow starts a Follower on a memory metastore's watch and returns the
// store and a function that stops the follower and waits for it.
func follow(t *testing.T, tb *Table, ts []Transport, mu *sync.Mutex) (metastore.Backend, func()) {
	t.Helper()
	store := metastore.NewMemory()
	ctx, cancel := context.WithCancel(context.Background())
	events, err := store.Watch(ctx, "segments/")
	if err != nil {
		t.Fatal(err)
	}
	f := &Follower{Table: tb, Store: store, Lock: mu, Transports: func() []Transport { return ts }, Log: hclog.NewNullLogger(), Timeout: time.Second}
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx, events) }()
	return store, func() {
		cancel()
		<-done
		store.Close()
	}
}

// waitFor waits until cond holds of handle id, woken by every change of
// the table.
func waitFor(t *testing.T, tb *Table, mu *sync.Mutex, id uint32, what string, cond func(h *Handle) bool) *Handle {
	t.Helper()
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	for {
		ch := tb.Changed()
		mu.Lock()
		h := tb.Get(id)
		mu.Unlock()
		if cond(h) {
			return h
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("%s: not seen within 5s; handle %+v", what, h)
		}
	}
}

func TestFollowerAppliesWatchEvents(t *testing.T) {
	ctx := context.Background()
	tcp := newTransport("tcp")
	ts := []Transport{tcp}
	var mu sync.Mutex
	tb := New("here", time.Second)
	store, stop := follow(t, tb, ts, &mu)
	defer stop()
	put := func(d *segment.Descriptor) {
		b, err := d.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Put(ctx, "segments/b", b); err != nil {
			t.Fatal(err)
		}
	}
	put(desc(7, 0x1000))
	mu.Lock()
	h, err := tb.Open(ctx, "b", "segments/b", desc(7, 0x1000), ts)
	mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	// Another segment's change and garbage under the key change nothing.
	if err := store.Put(ctx, "segments/other", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := store.Put(ctx, "segments/b", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	put(desc(7, 0x1000, 0x9000))
	h = waitFor(t, tb, &mu, h.ID, "re-registration", func(h *Handle) bool { return len(h.Desc.Buffers) == 2 })
	if h.Retired != "" || !h.Opened[0] {
		t.Fatalf("refreshed handle %+v, want it open", h)
	}
	if _, _, err := segment.Translate(h.Desc.Buffers, 0x9000+10, 10, true); err != nil {
		t.Fatalf("the new buffer is not usable through the handle: %v", err)
	}
	if err := store.Delete(ctx, "segments/b"); err != nil {
		t.Fatal(err)
	}
	h = waitFor(t, tb, &mu, h.ID, "delete", func(h *Handle) bool { return h.Gone != "" })
	if h.Retired != "" || !h.Opened[0] {
		t.Fatalf("gone handle %+v, want it still open", h)
	}
	put(desc(8, 0x2000))
	h = waitFor(t, tb, &mu, h.ID, "restart", func(h *Handle) bool { return h.Retired != "" })
	if !strings.Contains(h.Retired, "now incarnation 0x8") {
		t.Fatalf("retired as %q, want it to name incarnation 0x8", h.Retired)
	}
	if _, ok := tcp.open(h.ID); ok {
		t.Fatal("the retired handle's peer is still open")
	}
}

// newFollower is a Follower over transports ts, a fresh table and a
// memory metastore (closed when the test ends), to be run on a channel of
// events the test writes.
func newFollower(t *testing.T, ts []Transport) *Follower {
	t.Helper()
	store := metastore.NewMemory()
	t.Cleanup(func() { store.Close() })
	return &Follower{Table: New("here", time.Second), Store: store, Lock: &sync.Mutex{}, Transports: func() []Transport { return ts },
		Log: hclog.NewNullLogger(), Timeout: time.Second}
}

// TestFollowerResync: after a Resync every cached key is read again.
func TestFollowerResync(t *testing.T) {
	ctx := context.Background()
	ts := []Transport{newTransport("tcp")}
	f := newFollower(t, ts)
	f.Now = func() time.Time { return time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC) }
	tb, store := f.Table, f.Store
	for _, k := range []string{"b", "c"} {
		if _, err := tb.Open(ctx, k, "segments/"+k, desc(7, 0x1000), ts); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := desc(8).Encode()
	if err := store.Put(ctx, "segments/b", b); err != nil { // b restarted; c is gone
		t.Fatal(err)
	}
	events := make(chan metastore.Event, 1)
	events <- metastore.Event{Kind: metastore.Resync}
	close(events)
	f.Run(ctx, events) // returns when events closes
	if h := tb.Get(1); !strings.Contains(h.Retired, "now incarnation 0x8") {
		t.Fatalf("b after resync: %+v, want retired", h)
	}
	if h := tb.Get(2); h.Retired != "" || !strings.Contains(h.Gone, "2026-12-01T09:00:00Z") {
		t.Fatalf("c after resync: %+v, want gone since the simulated now", h)
	}
	if keys := tb.Keys(); !slices.Equal(keys, []string{"segments/c"}) {
		t.Fatalf("Keys() = %v, want only c's (b's handle is retired)", keys)
	}
}

// TestSeenCountsUncachedKeys: a change to a key no handle caches yet is
// counted, and a resync counts for every key, so that an OpenSegment
// reading the key meanwhile knows to read it again.
func TestSeenCountsUncachedKeys(t *testing.T) {
	f := newFollower(t, nil)
	events := make(chan metastore.Event, 3)
	events <- metastore.Event{Kind: metastore.Put, Key: "segments/b", Value: []byte("{}")}
	events <- metastore.Event{Kind: metastore.Delete, Key: "segments/b"}
	events <- metastore.Event{Kind: metastore.Resync}
	close(events)
	f.Run(context.Background(), events)
	f.Lock.Lock()
	defer f.Lock.Unlock()
	if b, c := f.Seen("segments/b"), f.Seen("segments/c"); b != 3 || c != 1 {
		t.Fatalf("Seen(b) = %d, Seen(c) = %d; want 3 (put, delete, resync) and 1 (resync)", b, c)
	}
}

func TestIsHostPort(t *testing.T) {
	for name, want := range map[string]bool{"127.0.0.1:7000": true, "h:1": true, "engine-a": false, ":7000": false, "h:0": false, "h:x": false} {
		if got := IsHostPort(name); got != want {
			t.Errorf("IsHostPort(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestFollowerStaleEvent: an event that arrives after the handle already
// holds a newer descriptor (a burst of publishes: the opener read the
// second while the watch still delivers the first) does not take back the
// buffers registered since; the follower applies what the store holds.
func TestFollowerStaleEvent(t *testing.T) {
	ctx := context.Background()
	ts := []Transport{newTransport("tcp")}
	f := newFollower(t, ts)
	tb, store := f.Table, f.Store
	older, newer := desc(7, 0x1000), desc(7, 0x1000, 0x2000)
	nb, _ := newer.Encode()
	if err := store.Put(ctx, "segments/b", nb); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Open(ctx, "b", "segments/b", newer, ts); err != nil {
		t.Fatal(err)
	}
	ob, _ := older.Encode()
	events := make(chan metastore.Event, 1)
	events <- metastore.Event{Kind: metastore.Put, Key: "segments/b", Value: ob}
	close(events)
	f.Run(ctx, events)
	if h := tb.Get(1); h.Retired != "" || len(h.Desc.Buffers) != 2 {
		t.Fatalf("after a stale event: %+v, want the newer descriptor's 2 buffers kept", h)
	}
}

// An imported descriptor opens a handle known by the name it carries,
// with no key (nothing watches it), and a retired imported handle says to
// import a new blob.
func TestImport(t *testing.T) {
	ctx := context.Background()
	tcp := newTransport("tcp")
	ts := []Transport{tcp}
	tb := New("here", time.Second)
	d := desc(7, 0x1000)
	d.Name = "b"
	h, err := tb.Import(ctx, d, ts)
	if err != nil {
		t.Fatal(err)
	}
	if h.Name != "b" || h.Key != "" || !h.Imported || !h.Opened[0] {
		t.Fatalf("imported %+v; want handle b, no key, imported, open in tcp", h)
	}
	if p, ok := tcp.open(h.ID); !ok || p.Segment != "b" || p.Incarnation != 7 {
		t.Fatalf("tcp has peer %+v, %v", p, ok)
	}
	if keys := tb.Keys(); len(keys) != 0 {
		t.Fatalf("an imported handle is watched under %q", keys)
	}
	tb.Retire(ctx, h.ID, 8, ts)
	if r := tb.Get(h.ID).Retired; !strings.Contains(r, "now incarnation 0x8") || !strings.Contains(r, "import a blob of its new life") {
		t.Fatalf("retired as %q; want the new incarnation and to import a new blob", r)
	}
	// A handle opened by name says to open it again, as before.
	h2, err := tb.Open(ctx, "c", "segments/c", desc(3, 0x1000), ts)
	if err != nil {
		t.Fatal(err)
	}
	tb.Retire(ctx, h2.ID, 4, ts)
	if r := tb.Get(h2.ID).Retired; strings.Contains(r, "import") || !strings.Contains(r, "open it again") {
		t.Fatalf("an opened handle retired as %q", r)
	}
}

// signedDesc is desc(inc, bases...) published as publication seq, signed
// under s.
func signedDesc(t *testing.T, s *segment.Signer, inc, seq uint64, bases ...uint64) (*segment.Descriptor, []byte) {
	t.Helper()
	d := desc(inc, bases...)
	d.Seq = seq
	b, err := s.Encode(d)
	if err != nil {
		t.Fatal(err)
	}
	return d, b
}

// TestReplayKeepsTheNewest is the attack of a metastore writer who holds
// no secret but replays what the victim once published: its own older
// signed descriptor of this life (fewer buffers), one of its previous
// life (which would retire the handle to the live one), an unsigned
// forgery, and a DELETE. A peer that has seen the newest keeps it through
// each, in its open handle and when it opens the segment again.
func TestReplayKeepsTheNewest(t *testing.T) {
	ctx := context.Background()
	s, err := segment.NewSigner([]byte("0123456789abcdef-cluster"))
	if err != nil {
		t.Fatal(err)
	}
	ts := []Transport{newTransport("tcp")}
	f := newFollower(t, ts)
	f.Signer = s
	tb, store := f.Table, f.Store
	tb.Ordered = true
	newest, nb := signedDesc(t, s, 8, 300, 0x1000, 0x2000)
	_, sameLife := signedDesc(t, s, 8, 200, 0x1000)
	_, lastLife := signedDesc(t, s, 7, 100, 0x1000)
	forged, _ := desc(9, 0x5000).Encode()
	if err := store.Put(ctx, "segments/b", nb); err != nil {
		t.Fatal(err)
	}
	h, err := tb.Open(ctx, "b", "segments/b", newest, ts)
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string) {
		t.Helper()
		h := tb.Get(h.ID)
		if h.Retired != "" || h.Desc.Incarnation != 8 || h.Desc.Seq != 300 || len(h.Desc.Buffers) != 2 || !h.Opened[0] {
			t.Fatalf("after %s: handle %+v; want the newest descriptor (incarnation 8, seq 300, 2 buffers) kept, open", what, h)
		}
	}
	for _, c := range []struct {
		what string
		raw  []byte
	}{{"a replay of an older publication of this life", sameLife}, {"a replay of the previous life", lastLife}, {"an unsigned forgery", forged}} {
		if err := store.Put(ctx, "segments/b", c.raw); err != nil {
			t.Fatal(err)
		}
		events := make(chan metastore.Event, 2)
		events <- metastore.Event{Kind: metastore.Put, Key: "segments/b", Value: c.raw}
		events <- metastore.Event{Kind: metastore.Resync}
		close(events)
		f.Run(ctx, events)
		check(c.what)
	}
	if err := store.Delete(ctx, "segments/b"); err != nil {
		t.Fatal(err)
	}
	events := make(chan metastore.Event, 1)
	events <- metastore.Event{Kind: metastore.Delete, Key: "segments/b"}
	close(events)
	f.Run(ctx, events)
	if h := tb.Get(h.ID); h.Retired != "" || h.Desc.Seq != 300 || !h.Opened[0] {
		t.Fatalf("after a DELETE: %+v; want the newest descriptor kept and the handle open", h)
	}
	// Opening the segment again on a replayed descriptor: the handle
	// stays on the newest, and so does a new handle after a close.
	old, _ := s.Decode("segments/b", lastLife)
	h2, err := tb.Open(ctx, "b", "segments/b", old, ts)
	if err != nil {
		t.Fatal(err)
	}
	if h2.ID != h.ID || h2.Desc.Seq != 300 || h2.Retired != "" {
		t.Fatalf("OpenSegment on a replay of the previous life: %+v; want handle %d kept on seq 300", h2, h.ID)
	}
	if !tb.Stale("b", old) || tb.Stale("b", newest) {
		t.Fatal("Stale does not tell the replay from the newest")
	}
	if err := tb.Close(ctx, h.ID, ts); err != nil {
		t.Fatal(err)
	}
	h3, err := tb.Open(ctx, "b", "segments/b", old, ts)
	if err != nil {
		t.Fatal(err)
	}
	if h3.Desc.Seq != 300 || h3.Desc.Incarnation != 8 {
		t.Fatalf("reopened after a close on a replay: %+v; want the newest seen (seq 300)", h3.Desc)
	}
	// A table that never saw the name cannot tell a replay from a first
	// view: it takes what it reads.
	fresh := New("here", time.Second)
	fresh.Ordered = true
	h4, err := fresh.Open(ctx, "b", "segments/b", old, ts)
	if err != nil || h4.Desc.Seq != 100 {
		t.Fatalf("a fresh table: %+v, %v; want the descriptor it read", h4, err)
	}
}

// failingStore is a metastore whose Get fails: with its context's error
// once that ends (it waits for it, telling got first), else with err.
type failingStore struct {
	metastore.Store
	err error
	got chan struct{}
}

func (s *failingStore) Get(ctx context.Context, key string) ([]byte, error) {
	if s.err != nil {
		return nil, s.err
	}
	s.got <- struct{}{}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestFollowerQuietWhenItsWatchEnds: a re-read that fails because the
// follower is being stopped (the engine closes) logs nothing; one that
// fails while the watch runs warns, naming the key.
func TestFollowerQuietWhenItsWatchEnds(t *testing.T) {
	for _, stopping := range []bool{false, true} {
		tcp := newTransport("tcp")
		ts := []Transport{tcp}
		tb := New("here", time.Second)
		if _, err := tb.Open(context.Background(), "b", "segments/b", desc(7, 0x1000), ts); err != nil {
			t.Fatal(err)
		}
		var logged strings.Builder
		var mu sync.Mutex
		store := &failingStore{got: make(chan struct{})}
		if !stopping {
			store.err = errors.New("connection refused")
		}
		f := &Follower{Table: tb, Store: store, Lock: &mu, Transports: func() []Transport { return ts },
			Log: hclog.New(&hclog.LoggerOptions{Output: &logged}), Timeout: time.Hour}
		ctx, cancel := context.WithCancel(context.Background())
		events := make(chan metastore.Event, 1)
		done := make(chan struct{})
		go func() { defer close(done); f.Run(ctx, events) }()
		events <- metastore.Event{Kind: metastore.Put, Key: "segments/b"}
		if stopping {
			<-store.got // the re-read is under way: stop the follower under it
			cancel()
			<-done
		} else {
			close(events) // Run returns once it has handled the event
			<-done
			cancel()
		}
		warned := strings.Contains(logged.String(), "re-reading a descriptor")
		switch {
		case stopping && warned:
			t.Errorf("a re-read ended by the follower's stop logged: %s", logged.String())
		case !stopping && !warned:
			t.Errorf("a re-read that failed while the watch runs logged nothing; want a warning")
		}
	}
}

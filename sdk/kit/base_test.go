package kit_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/kit"
	"github.com/ferrydev/ferry/sdk/ring"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type region struct{ kit.RegionBase }

func newRegion(r sdk.Region) *region {
	g := &region{}
	g.Init(r)
	return g
}

type peer struct {
	id     uint32
	closed int
}

func (p *peer) Close() { p.closed++ }

type base = kit.Base[*region, *peer]

func newBase() *base { return &base{Name: "mine", MaxNameLen: 8} }

// completions records what a transport reported, by token.
type completions struct {
	mu  sync.Mutex
	got map[uint64]ring.Status
}

func (c *completions) Complete(token uint64, st ring.Status, _ uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.got == nil {
		c.got = map[uint64]ring.Status{}
	}
	c.got[token] = st
}

func (c *completions) status(t *testing.T, token uint64) ring.Status {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	st, ok := c.got[token]
	if !ok {
		t.Fatalf("token %d: not completed", token)
	}
	return st
}

func started(t *testing.T) *base {
	t.Helper()
	b := newBase()
	if _, err := b.Start(sdk.StartConfig{Engine: "e", Incarnation: 7}, noEndpoint); err != nil {
		t.Fatal(err)
	}
	return b
}

func wantErr(t *testing.T, err error, text string) {
	t.Helper()
	if err == nil || err.Error() != text {
		t.Fatalf("error %v, want %q", err, text)
	}
}

func noEndpoint() (sdk.Endpoint, error) { return nil, nil }

func startErr(b *base, cfg sdk.StartConfig) error {
	_, err := b.Start(cfg, noEndpoint)
	return err
}

func TestStartGuards(t *testing.T) {
	b := newBase()
	wantErr(t, startErr(b, sdk.StartConfig{}), "mine: start: empty engine name")
	wantErr(t, startErr(b, sdk.StartConfig{Engine: "too-long-name"}), "mine: start: engine name longer than 8 bytes")
	boom := errors.New("boom")
	var during string
	_, err := b.Start(sdk.StartConfig{Engine: "e", Incarnation: 3}, func() (sdk.Endpoint, error) {
		during = b.Engine()
		return sdk.Endpoint("x"), boom
	})
	if !errors.Is(err, boom) || b.Started() {
		t.Fatalf("failed start: %v, started %v", err, b.Started())
	}
	if during != "e" {
		t.Fatalf("Engine() during start = %q, want e", during)
	}
	ep := sdk.Endpoint("addr")
	got, err := b.Start(sdk.StartConfig{Engine: "e", Incarnation: 4}, func() (sdk.Endpoint, error) { return ep, nil })
	if err != nil {
		t.Fatalf("start after a failed start: %v", err)
	}
	if string(got) != "addr" || &got[0] == &ep[0] {
		t.Fatalf("endpoint %q: not a copy of the plugin's", got)
	}
	if !b.Started() || b.Engine() != "e" || b.Incarnation() != 4 {
		t.Fatalf("started %v engine %q incarnation %d", b.Started(), b.Engine(), b.Incarnation())
	}
	wantErr(t, startErr(b, sdk.StartConfig{Engine: "e"}), "mine: already started")
	if err := b.Stop(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	wantErr(t, startErr(b, sdk.StartConfig{Engine: "e"}), "mine: start after stop")
}

func TestStopSweepsOnceAndWaits(t *testing.T) {
	b := started(t)
	release := make(chan struct{})
	b.Goroutines.Add(1)
	go func() {
		defer b.Goroutines.Done()
		<-release
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	sweeps := 0
	err := b.Stop(ctx, func() { sweeps++ })
	if !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), "mine: stop: ") {
		t.Fatalf("stop with a goroutine left: %v", err)
	}
	close(release)
	if err := b.Stop(context.Background(), func() { sweeps++ }); err != nil {
		t.Fatal(err)
	}
	if sweeps != 1 || !b.Stopped() {
		t.Fatalf("sweeps %d, stopped %v", sweeps, b.Stopped())
	}
}

func TestRegisterMemory(t *testing.T) {
	b := started(t)
	mem := make([]byte, 64)
	for _, tc := range []struct {
		r    sdk.Region
		want string
	}{
		{sdk.Region{ID: 1, Mem: mem, Perm: 9}, "mine: region 1: unknown permission 9"},
		{sdk.Region{ID: 1, Mem: mem, Perm: sdk.PermLocal, Kind: "cuda"}, `mine: region 1: memory kind "cuda" is not supported (cpu only)`},
		{sdk.Region{ID: 1, Perm: sdk.PermLocal}, "mine: region 1: empty"},
	} {
		wantErr(t, b.RegisterMemory(tc.r, newRegion), tc.want)
	}
	if err := b.RegisterMemory(sdk.Region{ID: 1, Mem: mem, Perm: sdk.PermRemoteRead}, newRegion); err != nil {
		t.Fatal(err)
	}
	wantErr(t, b.RegisterMemory(sdk.Region{ID: 1, Mem: mem, Perm: sdk.PermLocal, Kind: "cpu"}, newRegion), "mine: region 1 already registered")
	r, err := b.UnregisterMemory(1)
	if err != nil || r == nil || &r.Mem[0] != &mem[0] || r.ID != 1 || r.Perm != sdk.PermRemoteRead {
		t.Fatalf("unregister: %v", err)
	}
	_, err = b.UnregisterMemory(1)
	wantErr(t, err, "mine: region 1 not registered")

	b.MemoryKinds = []sdk.MemoryKind{sdk.MemoryCPU, sdk.MemoryCUDA}
	if err := b.RegisterMemory(sdk.Region{ID: 2, Mem: mem, Perm: sdk.PermLocal, Kind: "cuda"}, newRegion); err != nil {
		t.Fatalf("a kind the plugin takes: %v", err)
	}
	wantErr(t, b.RegisterMemory(sdk.Region{ID: 3, Mem: mem, Perm: sdk.PermLocal, Kind: "rocm"}, newRegion),
		`mine: region 3: memory kind "rocm" is not supported (cpu, cuda only)`)

	if err := b.Stop(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	wantErr(t, b.RegisterMemory(sdk.Region{ID: 4, Mem: mem, Perm: sdk.PermLocal}, newRegion), "mine: register after stop")
}

func TestPeers(t *testing.T) {
	b := newBase()
	wantErr(t, b.CheckPeer(sdk.Peer{ID: 1, Segment: "s"}), "mine: open peer: transport not running")
	b = started(t)
	wantErr(t, b.CheckPeer(sdk.Peer{ID: 1, Segment: "much-too-long"}), "mine: peer 1: segment name longer than 8 bytes")
	if err := b.CheckPeer(sdk.Peer{ID: 1, Segment: "s"}); err != nil {
		t.Fatal(err)
	}
	cause := errors.New("bad endpoint")
	if err := b.PeerError(sdk.Peer{ID: 1, Segment: "s"}, cause); !errors.Is(err, cause) || err.Error() != "mine: peer 1 (s): bad endpoint" {
		t.Fatalf("peer error: %v", err)
	}
	starts := 0
	p1 := &peer{id: 1}
	if err := b.AddPeer(1, p1, func() {
		starts++
		if b.Peers.Get(1) != nil {
			t.Error("the peer is visible before its start ran")
		}
	}); err != nil {
		t.Fatal(err)
	}
	dup := &peer{id: 1}
	wantErr(t, b.AddPeer(1, dup, func() { starts++ }), "mine: peer 1 already open")
	p2 := &peer{id: 2}
	if err := b.AddPeer(2, p2, nil); err != nil {
		t.Fatal(err)
	}
	if starts != 1 || dup.closed != 1 || b.Peers.Get(1) != p1 || len(b.Peers.List()) != 2 {
		t.Fatalf("starts %d, refused peer closed %d times, get %v, list %v", starts, dup.closed, b.Peers.Get(1), b.Peers.List())
	}
	if err := b.ClosePeer(1); err != nil || p1.closed != 1 || b.Peers.Get(1) != nil {
		t.Fatalf("close peer: %v, closed %d times", err, p1.closed)
	}
	wantErr(t, b.ClosePeer(1), "mine: peer 1 not open")
	var swept []*peer
	if err := b.Stop(context.Background(), func() { swept = b.Peers.CloseAll() }); err != nil {
		t.Fatal(err)
	}
	if len(swept) != 1 || swept[0] != p2 || b.Peers.Get(2) != nil || b.Peers.List() != nil {
		t.Fatalf("CloseAll returned %v", swept)
	}
	late := &peer{id: 3}
	wantErr(t, b.AddPeer(3, late, func() { starts++ }), "mine: open peer: transport stopped")
	wantErr(t, b.CheckPeer(sdk.Peer{ID: 3, Segment: "s"}), "mine: open peer: transport not running")
	if starts != 1 || late.closed != 1 {
		t.Fatalf("a peer refused after stop: start ran (%d starts) or not closed (%d)", starts, late.closed)
	}
}

func TestAdmitAndLocal(t *testing.T) {
	b := started(t)
	mem := make([]byte, 100)
	if err := b.RegisterMemory(sdk.Region{ID: 5, Mem: mem, Perm: sdk.PermLocal}, newRegion); err != nil {
		t.Fatal(err)
	}
	if err := b.AddPeer(1, &peer{id: 1}, nil); err != nil {
		t.Fatal(err)
	}
	w := func(tok uint64, f func(*ring.Descriptor)) ring.Descriptor {
		d := ring.Descriptor{Token: tok, Op: ring.OpWrite, Peer: 1, LocalRegion: 5, LocalOffset: 10, Length: 20, RemoteOffset: 0}
		f(&d)
		return d
	}
	var c completions
	for _, tc := range []struct {
		name string
		d    ring.Descriptor
		want ring.Status
	}{
		{"nop", w(1, func(d *ring.Descriptor) { d.Op = ring.OpNop }), ring.StatusOK},
		{"zero length", w(2, func(d *ring.Descriptor) { d.Length = 0 }), ring.StatusInvalid},
		{"passed deadline", w(3, func(d *ring.Descriptor) { d.Deadline = 1 }), ring.StatusTimeout},
		{"unknown peer", w(4, func(d *ring.Descriptor) { d.Peer = 2 }), ring.StatusPeerUnknown},
		{"unknown region", w(5, func(d *ring.Descriptor) { d.LocalRegion = 6 }), ring.StatusNotRegistered},
		{"past the end", w(6, func(d *ring.Descriptor) { d.LocalOffset = 90 }), ring.StatusOutOfBounds},
		{"local overflow", w(7, func(d *ring.Descriptor) { d.LocalOffset = ^uint64(0) - 5 }), ring.StatusOutOfBounds},
		{"remote overflow", w(8, func(d *ring.Descriptor) { d.RemoteOffset = ^uint64(0) - 5 }), ring.StatusOutOfBounds},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.d
			if _, _, _, ok := b.Accept(&d, &c); ok {
				t.Fatal("accepted")
			}
			if got := c.status(t, d.Token); got != tc.want {
				t.Fatalf("status %v, want %v", got, tc.want)
			}
		})
	}
	d := w(9, func(*ring.Descriptor) {})
	p, ok := b.Admit(&d, &c)
	if !ok || p.id != 1 {
		t.Fatalf("admit: %v %v", p, ok)
	}
	r, got, ok := b.Local(&d, &c)
	if !ok || len(got) != 20 || cap(got) != 20 || &got[0] != &mem[10] {
		t.Fatalf("local: ok %v len %d cap %d", ok, len(got), cap(got))
	}
	// The reference Local took holds the region past UnregisterMemory.
	u, err := b.UnregisterMemory(5)
	if err != nil {
		t.Fatal(err)
	}
	u.Release()
	select {
	case <-u.Drained():
		t.Fatal("drained while Local's reference is held")
	default:
	}
	r.Release()
	<-u.Drained()

	m := map[string]uint64{}
	b.Outcomes.Export(m)
	if m["ops_completed"] != 1 || m["ops_failed"] != 7 || m["ops_timed_out"] != 1 {
		t.Fatalf("outcomes %v", m)
	}
	if err := b.Stop(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	d = w(10, func(*ring.Descriptor) {})
	if _, ok := b.Admit(&d, &c); ok || c.status(t, 10) != ring.StatusShutdown {
		t.Fatalf("admitted after stop")
	}
}

type nopCompleter struct{}

func (nopCompleter) Complete(uint64, ring.Status, uint64) {}

// ready is a started Base with region 1 (64 bytes) and peer 1.
func ready(t testing.TB) *base {
	t.Helper()
	b := newBase()
	if _, err := b.Start(sdk.StartConfig{Engine: "e"}, noEndpoint); err != nil {
		t.Fatal(err)
	}
	if err := b.RegisterMemory(sdk.Region{ID: 1, Mem: make([]byte, 64), Perm: sdk.PermLocal}, newRegion); err != nil {
		t.Fatal(err)
	}
	if err := b.AddPeer(1, &peer{id: 1}, nil); err != nil {
		t.Fatal(err)
	}
	return b
}

// accept runs one descriptor through Accept, as Submit does.
func accept(b *base, d *ring.Descriptor, c sdk.Completer) {
	if _, r, _, ok := b.Accept(d, c); ok {
		r.Release()
	}
}

// TestAdmitAllocatesNothing: Admit and Local are on every descriptor's path.
func TestAdmitAllocatesNothing(t *testing.T) {
	b := ready(t)
	d := ring.Descriptor{Token: 1, Op: ring.OpRead, Peer: 1, LocalRegion: 1, Length: 64}
	var c sdk.Completer = nopCompleter{}
	if n := testing.AllocsPerRun(1000, func() { accept(b, &d, c) }); n != 0 {
		t.Fatalf("%v allocations per descriptor", n)
	}
	if err := b.Stop(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkAccept is what every descriptor pays for the kit's checks.
func BenchmarkAccept(b *testing.B) {
	k := ready(b)
	d := ring.Descriptor{Token: 1, Op: ring.OpRead, Peer: 1, LocalRegion: 1, Length: 64}
	var c sdk.Completer = nopCompleter{}
	b.ReportAllocs()
	for b.Loop() {
		accept(k, &d, c)
	}
}

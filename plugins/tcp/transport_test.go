package tcp_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrydev/ferry/plugins/tcp"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
)

const (
	// region ids on engine A (the initiator)
	aSrc = 1
	aDst = 2
	// region ids on engine B (the target)
	bRW    = 10
	bRO    = 11
	bLocal = 12
	// peer id of B on A
	peerB = 7
)

// world is engine A with B opened as peer peerB, and memory on both.
type world struct {
	a, b                *engine
	src, dst            []byte // A's
	rw, ro, local       []byte // B's
	nextToken           atomic.Uint64
	col                 *plugintest.Collector
	aSrcSize, bRegionSz int
}

func newWorld(t testing.TB, size int, config string) *world {
	t.Helper()
	return worldOf(t, size, startEngine(t, "engine-a", 100, config), startEngine(t, "engine-b", 200, config))
}

// worldOf registers the world's regions in engines a and b and opens b
// on a.
func worldOf(t testing.TB, size int, a, b *engine) *world {
	t.Helper()
	w := &world{col: plugintest.NewCollector(t), a: a, b: b}
	w.src, w.dst = make([]byte, size), make([]byte, size)
	w.rw, w.ro, w.local = make([]byte, size), make([]byte, 1<<16), make([]byte, 1<<16)
	fill(w.ro, 11)
	fill(w.local, 12)
	w.a.register(t, aSrc, w.src, sdk.PermLocal)
	w.a.register(t, aDst, w.dst, sdk.PermLocal)
	w.b.register(t, bRW, w.rw, sdk.PermRemoteReadWrite)
	w.b.register(t, bRO, w.ro, sdk.PermRemoteRead)
	w.b.register(t, bLocal, w.local, sdk.PermLocal)
	w.a.open(t, peerB, w.b)
	return w
}

func (w *world) submit(d ring.Descriptor) uint64 {
	d.Token = w.nextToken.Add(1)
	w.a.tr.Submit(&d, w.col)
	return d.Token
}

func (w *world) do(t testing.TB, d ring.Descriptor) plugintest.Completion {
	t.Helper()
	return w.col.Wait(w.submit(d))
}

func write(local uint32, loff uint64, remote uint32, roff, n uint64) ring.Descriptor {
	return ring.Descriptor{Op: ring.OpWrite, Peer: peerB, LocalRegion: local, LocalOffset: loff, RemoteRegion: remote, RemoteOffset: roff, Length: n}
}

func read(local uint32, loff uint64, remote uint32, roff, n uint64) ring.Descriptor {
	return ring.Descriptor{Op: ring.OpRead, Peer: peerB, LocalRegion: local, LocalOffset: loff, RemoteRegion: remote, RemoteOffset: roff, Length: n}
}

func TestRoundTrip(t *testing.T) {
	const size = 64<<20 + 64
	w := newWorld(t, size, "")
	sizes := []uint64{1, 7, 4095, 4096, 65537, 1<<20 + 3, 64 << 20}
	for i, n := range sizes {
		// A write copies a's src at 3 to b's rw at 5; a read, b's rw at 7
		// to a's dst at 9.
		for _, c := range []struct {
			op, what       string
			d              ring.Descriptor
			src, dst       []byte
			srcOff, dstOff uint64
			seed           uint64 // of src's pattern; dst's is seed+100
		}{
			{"write", "written range", write(aSrc, 3, bRW, 5, n), w.src, w.rw, 3, 5, 100},
			{"read", "read range", read(aDst, 9, bRW, 7, n), w.rw, w.dst, 7, 9, 300},
		} {
			t.Run(fmt.Sprintf("%s/%d", c.op, n), func(t *testing.T) {
				// Patterns and checks cover the transfer and 64 KiB around
				// it (the whole region for the largest size).
				win := min(uint64(size), c.dstOff+n+64<<10)
				fill(c.src[:win], c.seed+uint64(i))
				fill(c.dst[:win], c.seed+100+uint64(i))
				before := snapshot(c.dst[:win])
				got := w.do(t, c.d)
				if got.Status != ring.StatusOK || got.N != n {
					t.Fatalf("%s %d: %v, %d bytes", c.op, n, got.Status, got.N)
				}
				plugintest.MustEqual(t, c.what, c.dst[c.dstOff:c.dstOff+n], c.src[c.srcOff:c.srcOff+n])
				plugintest.MustEqual(t, "bytes before the range", c.dst[:c.dstOff], before[:c.dstOff])
				plugintest.MustEqual(t, "bytes after the range", c.dst[c.dstOff+n:win], before[c.dstOff+n:])
			})
		}
	}
	if got := w.do(t, read(aDst, 0, bRO, 1, 100)); got.Status != ring.StatusOK {
		t.Fatalf("read from a remote-read region: %v", got.Status)
	}
	plugintest.MustEqual(t, "read from remote-read region", w.dst[:100], w.ro[1:101])
	if s := w.a.stat(t, "bytes_sent"); s == 0 {
		t.Errorf("bytes_sent = 0")
	}
}

func TestConcurrentSubmissions(t *testing.T) {
	const (
		workers   = 8
		perWorker = 25
		chunk     = 4096 + 13
	)
	w := newWorld(t, workers*perWorker*chunk*2, "connections_per_peer = 3")
	fill(w.src, 1)
	fill(w.rw, 2)
	half := uint64(workers * perWorker * chunk)
	remoteBefore := snapshot(w.rw)
	var wg sync.WaitGroup
	tokens := make([][]uint64, workers)
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				k := uint64(g*perWorker + i)
				off := k * chunk
				if i%2 == 0 {
					tokens[g] = append(tokens[g], w.submit(write(aSrc, off, bRW, off, chunk)))
				} else {
					// reads come from the upper half, which nobody writes
					tokens[g] = append(tokens[g], w.submit(read(aDst, off, bRW, half+off, chunk)))
				}
			}
		}()
	}
	wg.Wait()
	for _, ts := range tokens {
		for _, tok := range ts {
			if got := w.col.Wait(tok); got.Status != ring.StatusOK || got.N != chunk {
				t.Fatalf("token %d: %v, %d bytes", tok, got.Status, got.N)
			}
		}
	}
	for k := range uint64(workers * perWorker) {
		off := k * chunk
		if k%perWorker%2 == 0 {
			plugintest.MustEqual(t, fmt.Sprintf("write %d", k), w.rw[off:off+chunk], w.src[off:off+chunk])
		} else {
			plugintest.MustEqual(t, fmt.Sprintf("read %d", k), w.dst[off:off+chunk], remoteBefore[half+off:half+off+chunk])
		}
	}
	if n := w.col.Count(); n != workers*perWorker {
		t.Fatalf("%d completions, want %d", n, workers*perWorker)
	}
	if d := w.a.stat(t, "conns_dialed"); d < 1 || d > 3 {
		t.Errorf("conns_dialed = %d, want 1..3", d)
	}
}

// TestSmallWritesOneConnection: small writes in flight together, far
// below spillLoad, keep to one of the peer's two connections: the
// second is never dialed.
func TestSmallWritesOneConnection(t *testing.T) {
	const n, size = 64, 4096
	w := newWorld(t, n*size, "connections_per_peer = 2")
	fill(w.src, 3)
	var tokens []uint64
	for i := range uint64(n) {
		tokens = append(tokens, w.submit(write(aSrc, i*size, bRW, i*size, size)))
	}
	for _, tok := range tokens {
		if got := w.col.Wait(tok); got.Status != ring.StatusOK {
			t.Fatalf("token %d: %v", tok, got.Status)
		}
	}
	plugintest.MustEqual(t, "the writes", w.rw, w.src)
	if d := w.a.stat(t, "conns_dialed"); d != 1 {
		t.Errorf("conns_dialed = %d after %d small writes, want 1", d, n)
	}
}

func TestRejections(t *testing.T) {
	w := newWorld(t, 1<<16, "")
	fill(w.src, 5)
	fill(w.rw, 6)
	// A peer opened with what A believes about B, but wrongly.
	staleInc := uint32(8)
	if err := w.a.tr.OpenPeer(context.Background(), sdk.Peer{ID: staleInc, Segment: "engine-b", Incarnation: 199, Endpoint: w.b.ep}); err != nil {
		t.Fatal(err)
	}
	staleName := uint32(9)
	if err := w.a.tr.OpenPeer(context.Background(), sdk.Peer{ID: staleName, Segment: "engine-c", Incarnation: 200, Endpoint: w.b.ep}); err != nil {
		t.Fatal(err)
	}
	withPeer := func(d ring.Descriptor, p uint32) ring.Descriptor { d.Peer = p; return d }
	withOp := func(d ring.Descriptor, op ring.Op) ring.Descriptor { d.Op = op; return d }
	withDeadline := func(d ring.Descriptor, dl int64) ring.Descriptor { d.Deadline = dl; return d }
	size := uint64(len(w.rw))
	cases := []struct {
		name string
		d    ring.Descriptor
		want ring.Status
	}{
		{"write unknown remote region", write(aSrc, 0, 99, 0, 10), ring.StatusNotRegistered},
		{"read unknown remote region", read(aDst, 0, 99, 0, 10), ring.StatusNotRegistered},
		{"write out of bounds", write(aSrc, 0, bRW, size-5, 10), ring.StatusOutOfBounds},
		{"read out of bounds", read(aDst, 0, bRW, size, 1), ring.StatusOutOfBounds},
		{"write offset+length overflows", write(aSrc, 0, bRW, math.MaxUint64-4, 10), ring.StatusOutOfBounds},
		{"read offset+length overflows", read(aDst, 0, bRW, math.MaxUint64, 2), ring.StatusOutOfBounds},
		{"write to a remote-read region", write(aSrc, 0, bRO, 0, 10), ring.StatusPermission},
		{"write to a local region", write(aSrc, 0, bLocal, 0, 10), ring.StatusPermission},
		{"read from a local region", read(aDst, 0, bLocal, 0, 10), ring.StatusPermission},
		{"write with stale incarnation", withPeer(write(aSrc, 0, bRW, 0, 10), staleInc), ring.StatusStaleIncarnation},
		{"read with stale incarnation", withPeer(read(aDst, 0, bRW, 0, 10), staleInc), ring.StatusStaleIncarnation},
		{"write to the wrong segment", withPeer(write(aSrc, 0, bRW, 0, 10), staleName), ring.StatusStaleIncarnation},
		{"unknown peer", withPeer(write(aSrc, 0, bRW, 0, 10), 77), ring.StatusPeerUnknown},
		{"local region not registered", write(55, 0, bRW, 0, 10), ring.StatusNotRegistered},
		{"local read target not registered", read(55, 0, bRW, 0, 10), ring.StatusNotRegistered},
		{"local out of bounds", write(aSrc, size-3, bRW, 0, 10), ring.StatusOutOfBounds},
		{"local offset+length overflows", read(aDst, math.MaxUint64-1, bRW, 0, 10), ring.StatusOutOfBounds},
		{"zero length", write(aSrc, 0, bRW, 0, 0), ring.StatusInvalid},
		{"unknown op", withOp(write(aSrc, 0, bRW, 0, 10), 99), ring.StatusInvalid},
		{"completion op", withOp(write(aSrc, 0, bRW, 0, 10), ring.OpCompletion), ring.StatusInvalid},
		{"deadline passed", withDeadline(write(aSrc, 0, bRW, 0, 10), time.Now().Add(-time.Second).UnixNano()), ring.StatusTimeout},
		{"length over max_frame", write(aSrc, 0, bRW, 0, tcp.DefaultMaxFrame+1), ring.StatusInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rw, ro, local, dst := snapshot(w.rw), snapshot(w.ro), snapshot(w.local), snapshot(w.dst)
			got := w.do(t, c.d)
			if got.Status != c.want || got.N != 0 {
				t.Fatalf("got %v (%d bytes), want %v", got.Status, got.N, c.want)
			}
			plugintest.MustEqual(t, "B's read-write region", w.rw, rw)
			plugintest.MustEqual(t, "B's read-only region", w.ro, ro)
			plugintest.MustEqual(t, "B's local region", w.local, local)
			plugintest.MustEqual(t, "A's destination region", w.dst, dst)
		})
	}
	// The rejections left the good path working, on the same connections.
	if got := w.do(t, write(aSrc, 1, bRW, 2, 1000)); got.Status != ring.StatusOK {
		t.Fatalf("write after rejections: %v", got.Status)
	}
	plugintest.MustEqual(t, "write after rejections", w.rw[2:1002], w.src[1:1001])
	if r := w.b.stat(t, "frames_rejected"); r < 7 {
		t.Errorf("B frames_rejected = %d, want >= 7", r)
	}
	if r := w.b.stat(t, "hello_rejected"); r < 2 {
		t.Errorf("B hello_rejected = %d, want >= 2", r)
	}
	if got := w.do(t, ring.Descriptor{Op: ring.OpNop, Peer: 12345}); got.Status != ring.StatusOK {
		t.Errorf("nop: %v", got.Status)
	}
}

func TestPeerUnreachable(t *testing.T) {
	w := newWorld(t, 1<<12, "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ep := sdk.Endpoint(fmt.Sprintf(`{"v":1,"addrs":[%q]}`, addr))
	if err := w.a.tr.OpenPeer(context.Background(), sdk.Peer{ID: 3, Segment: "gone", Incarnation: 1, Endpoint: ep}); err != nil {
		t.Fatal(err)
	}
	d := write(aSrc, 0, bRW, 0, 10)
	d.Peer = 3
	if got := w.do(t, d); got.Status != ring.StatusPeerUnreachable {
		t.Fatalf("got %v, want %v", got.Status, ring.StatusPeerUnreachable)
	}
	if w.a.stat(t, "dial_failures") == 0 {
		t.Errorf("dial_failures = 0")
	}
	for _, bad := range []string{``, `{}`, `{"v":2,"addrs":["x:1"]}`, `{"v":1,"addrs":[]}`, `not json`} {
		if err := w.a.tr.OpenPeer(context.Background(), sdk.Peer{ID: 4, Segment: "x", Endpoint: sdk.Endpoint(bad)}); err == nil {
			t.Errorf("OpenPeer accepted endpoint %q", bad)
		}
	}
	if err := w.a.tr.OpenPeer(context.Background(), sdk.Peer{ID: peerB, Segment: "engine-b", Endpoint: w.b.ep}); err == nil {
		t.Errorf("OpenPeer accepted a peer id twice")
	}
}

// proxy forwards connections to target and can cut them all. It records
// the source address of every connection it accepts.
type proxy struct {
	ln      net.Listener
	target  string
	mu      sync.Mutex
	conns   []net.Conn
	sources []string // the IPs connections came from, in order
	wg      sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy { return newProxyAt(t, "127.0.0.1:0", target) }

// newProxyAt is newProxy listening on listen.
func newProxyAt(t *testing.T, listen, target string) *proxy {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
			p.mu.Lock()
			p.sources = append(p.sources, a.IP.String())
			p.mu.Unlock()
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); io.Copy(u, c); u.Close(); c.Close() }()
		go func() { defer p.wg.Done(); io.Copy(c, u); u.Close(); c.Close() }()
	}
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *proxy) close() {
	p.ln.Close()
	p.cut()
	p.wg.Wait()
}

// from returns the source IPs of the connections accepted so far.
func (p *proxy) from() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.sources...)
}

func (p *proxy) endpoint() sdk.Endpoint {
	return sdk.Endpoint(fmt.Sprintf(`{"v":1,"addrs":[%q]}`, p.ln.Addr().String()))
}

func TestRedialAfterFailure(t *testing.T) {
	w := newWorld(t, 1<<16, "connections_per_peer = 1")
	fill(w.src, 9)
	var bAddr struct{ Addrs []string }
	if err := jsonUnmarshal(w.b.ep, &bAddr); err != nil {
		t.Fatal(err)
	}
	px := newProxy(t, bAddr.Addrs[0])
	if err := w.a.tr.OpenPeer(context.Background(), sdk.Peer{ID: 20, Segment: "engine-b", Incarnation: 200, Endpoint: px.endpoint()}); err != nil {
		t.Fatal(err)
	}
	via := func(d ring.Descriptor) ring.Descriptor { d.Peer = 20; return d }
	if got := w.do(t, via(write(aSrc, 0, bRW, 0, 100))); got.Status != ring.StatusOK {
		t.Fatalf("first write: %v", got.Status)
	}
	px.cut()
	// The cut is noticed either by the idle reader (the next write dials
	// again and succeeds) or by the next write itself (it fails
	// PeerUnreachable and the one after dials again).
	ok := false
	for i := range 3 {
		got := w.do(t, via(write(aSrc, 100, bRW, 100, 100)))
		if got.Status == ring.StatusOK {
			ok = true
			break
		}
		if got.Status != ring.StatusPeerUnreachable {
			t.Fatalf("write %d after cut: %v", i, got.Status)
		}
	}
	if !ok {
		t.Fatalf("no write succeeded after the connection was cut")
	}
	plugintest.MustEqual(t, "after redial", w.rw[100:200], w.src[100:200])
	if d := w.a.stat(t, "conns_dialed"); d < 2 {
		t.Errorf("conns_dialed = %d, want >= 2", d)
	}
}

func TestClosePeerAndStopCompleteEverything(t *testing.T) {
	for _, how := range []string{"ClosePeer", "Stop"} {
		t.Run(how, func(t *testing.T) {
			const n, size = 300, 64 << 10
			w := newWorld(t, n*size, "")
			var tokens []uint64
			for i := range uint64(n) {
				// Disjoint ranges: the two connections write concurrently.
				off := i * size
				tokens = append(tokens, w.submit(write(aSrc, off, bRW, off, size)))
			}
			var err error
			if how == "ClosePeer" {
				err = w.a.tr.ClosePeer(context.Background(), peerB)
			} else {
				err = w.a.tr.Stop(context.Background())
			}
			if err != nil {
				t.Fatal(err)
			}
			// Everything completed before ClosePeer / Stop returned.
			if c := w.col.Count(); c != n {
				t.Fatalf("%d of %d completed when %s returned", c, n, how)
			}
			for _, tok := range tokens {
				if st := w.col.Wait(tok).Status; st != ring.StatusOK && st != ring.StatusShutdown {
					t.Fatalf("token %d: %v", tok, st)
				}
			}
			after := w.do(t, write(aSrc, 0, bRW, 0, 1))
			want := ring.StatusPeerUnknown
			if how == "Stop" {
				want = ring.StatusShutdown
			}
			if after.Status != want {
				t.Fatalf("submit after %s: %v, want %v", how, after.Status, want)
			}
		})
	}
}

func TestTargetStops(t *testing.T) {
	w := newWorld(t, 1<<20, "")
	if got := w.do(t, write(aSrc, 0, bRW, 0, 10)); got.Status != ring.StatusOK {
		t.Fatal(got.Status)
	}
	if err := w.b.tr.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Whether the idle connection's loss is noticed before or after the
	// write goes out, the write cannot succeed.
	if got := w.do(t, write(aSrc, 0, bRW, 0, 10)); got.Status != ring.StatusPeerUnreachable {
		t.Fatalf("write to a stopped peer: %v", got.Status)
	}
}

// TestUnregisterWaitsForInFlight unregisters regions while 64 MiB frames
// use them and checks that nothing writes the memory after the call
// returned.
func TestUnregisterWaitsForInFlight(t *testing.T) {
	const size = 64 << 20
	t.Run("target", func(t *testing.T) {
		w := newWorld(t, size, "")
		fill(w.src, 3)
		tok := w.submit(write(aSrc, 0, bRW, 0, size))
		if err := w.b.tr.UnregisterMemory(context.Background(), bRW); err != nil {
			t.Fatal(err)
		}
		after := snapshot(w.rw)
		got := w.col.Wait(tok)
		if got.Status != ring.StatusOK && got.Status != ring.StatusNotRegistered {
			t.Fatalf("write: %v", got.Status)
		}
		plugintest.MustEqual(t, "memory after unregister", w.rw, after)
		if got := w.do(t, write(aSrc, 0, bRW, 0, 10)); got.Status != ring.StatusNotRegistered {
			t.Fatalf("write after unregister: %v", got.Status)
		}
	})
	t.Run("initiator", func(t *testing.T) {
		w := newWorld(t, size, "")
		fill(w.rw, 4)
		tok1 := w.submit(read(aDst, 0, bRW, 0, size/2))
		tok2 := w.submit(read(aDst, size/2, bRW, 0, size/2))
		if err := w.a.tr.UnregisterMemory(context.Background(), aDst); err != nil {
			t.Fatal(err)
		}
		after := snapshot(w.dst)
		for _, tok := range []uint64{tok1, tok2} {
			if got := w.col.Wait(tok); got.Status != ring.StatusOK && got.Status != ring.StatusNotRegistered {
				t.Fatalf("read: %v", got.Status)
			}
		}
		plugintest.MustEqual(t, "memory after unregister", w.dst, after)
		if err := w.a.tr.UnregisterMemory(context.Background(), aDst); err == nil {
			t.Fatalf("second unregister succeeded")
		}
	})
}

func TestRegisterChecks(t *testing.T) {
	e := startEngine(t, "e", 1, "")
	ctx := context.Background()
	for _, r := range []sdk.Region{
		{ID: 1, Mem: nil, Perm: sdk.PermLocal},
		{ID: 1, Mem: make([]byte, 1), Perm: 0},
		{ID: 1, Mem: make([]byte, 1), Perm: 9},
		{ID: 1, Mem: make([]byte, 1), Perm: sdk.PermLocal, Kind: "cuda"},
	} {
		if err := e.tr.RegisterMemory(ctx, r); err == nil {
			t.Errorf("RegisterMemory accepted %+v", r)
		}
	}
	e.register(t, 1, make([]byte, 1), sdk.PermLocal)
	if err := e.tr.RegisterMemory(ctx, sdk.Region{ID: 1, Mem: make([]byte, 1), Perm: sdk.PermLocal}); err == nil {
		t.Errorf("RegisterMemory accepted an id twice")
	}
}

func TestDescribeProbe(t *testing.T) {
	tr := tcp.New()
	info, err := tr.Describe(context.Background())
	if err != nil || info.Name != "tcp" || len(info.MemoryKinds) != 1 || info.MemoryKinds[0] != "cpu" {
		t.Fatalf("Describe: %+v, %v", info, err)
	}
	pr, err := tr.Probe(context.Background())
	if err != nil || !pr.Available || len(pr.Rails) != 1 {
		t.Fatalf("Probe before start: %+v, %v", pr, err)
	}
	if r := pr.Rails[0]; r.NUMANode != -1 || r.BandwidthGbps != 0 {
		t.Errorf("loopback rail %+v: want NUMA node -1 and 0 Gb/s", r)
	}
	if err := tr.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}

	e := startEngine(t, "e", 1, `listen = ["127.0.0.1:0", "127.0.0.1:0"]`)
	pr, err = e.tr.Probe(context.Background())
	if err != nil || !pr.Available || len(pr.Rails) != 2 || pr.Rails[0].Name != "127.0.0.1:0" || pr.Rails[1].Name != "127.0.0.1:0#1" {
		t.Fatalf("Probe: %+v, %v", pr, err)
	}
	var ep struct {
		V     int
		Addrs []string
	}
	if err := jsonUnmarshal(e.ep, &ep); err != nil || ep.V != 1 || len(ep.Addrs) != 2 {
		t.Fatalf("endpoint %s: %+v, %v", e.ep, ep, err)
	}
}

func TestMultipleListenAddresses(t *testing.T) {
	// Two rails on B, one on A: A's rail pairs with one of B's addresses
	// (both match 127.0.0.1 equally, so the first) and its four
	// connections go there.
	a := startEngine(t, "a", 1, "connections_per_peer = 4")
	b := startEngine(t, "b", 2, `listen = ["127.0.0.1:0", "127.0.0.1:0"]`)
	src, dst := make([]byte, 1<<20), make([]byte, 1<<20)
	fill(src, 77)
	a.register(t, 1, src, sdk.PermLocal)
	b.register(t, 1, dst, sdk.PermRemoteReadWrite)
	a.open(t, 1, b)
	col := plugintest.NewCollector(t)
	for i := range uint64(16) {
		d := ring.Descriptor{Token: i, Op: ring.OpWrite, Peer: 1, LocalRegion: 1, LocalOffset: i << 16, RemoteRegion: 1, RemoteOffset: i << 16, Length: 1 << 16}
		a.tr.Submit(&d, col)
	}
	for i := range uint64(16) {
		if got := col.Wait(i); got.Status != ring.StatusOK {
			t.Fatalf("token %d: %v", i, got.Status)
		}
	}
	plugintest.MustEqual(t, "region", dst, src)
	if n := b.stat(t, "rail.0.conns_accepted"); n < 1 || n > 4 {
		t.Errorf("B rail.0.conns_accepted = %d, want 1..4", n)
	}
	if n := b.stat(t, "rail.1.conns_accepted"); n != 0 {
		t.Errorf("B rail.1.conns_accepted = %d, want 0", n)
	}
}

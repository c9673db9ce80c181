package tcp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/plugins/tcp"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
)

// runConn opens a raw connection to e as engine from's plugin run and
// returns it with the hello's answer.
func runConn(t *testing.T, e *engine, from string, run uint64) (*net.TCPConn, ring.Status) {
	t.Helper()
	c := dialRaw(t, e)
	r := hello(t, c, tcp.Hello{Version: tcp.ProtocolVersion, Flags: tcp.FlagFrom | tcp.FlagRun, Incarnation: e.incarnation, Segment: e.name, From: from, Run: run})
	return c, r.Status
}

// waitApplying waits until e's listener is reading a frame into a
// region.
func waitApplying(t *testing.T, e *engine) {
	t.Helper()
	until := time.Now().Add(waitLimit)
	for !tcp.ApplyingFrame(e.tr) {
		if time.Now().After(until) {
			t.Fatal("the half frame never reached the listener")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestFenceStopsARunsFrames: a fence of a peer's run, asked while a
// write frame of that run is half applied, waits for that frame (which
// finishes); from then on no frame of the run is applied (its
// connection is cut), and no new connection of it is taken. Another
// engine cannot fence it; a run never seen is fenced all the same.
func TestFenceStopsARunsFrames(t *testing.T) {
	const n = 64 << 10
	ctx := context.Background()
	b := startEngine(t, "fence-b", 7, `listen = ["127.0.0.1:0"]`)
	mem := make([]byte, 2*n)
	b.register(t, 1, mem, sdk.PermRemoteReadWrite)

	c, st := runConn(t, b, "fence-a", 0x77)
	if st != ring.StatusOK {
		t.Fatalf("hello of a run: %s", st)
	}
	// A first frame, applied and answered: the connection is served.
	mustWrite(t, c, header(tcp.Header{Op: ring.OpWrite, Seq: 1, Incarnation: 7, Region: 1, Offset: 0, Length: n}))
	mustWrite(t, c, bytes.Repeat([]byte{1}, n))
	if r := response(t, c); r.Status != ring.StatusOK {
		t.Fatalf("first write: %+v", r)
	}

	// Half of a second frame: it is being applied when the fence comes.
	mustWrite(t, c, header(tcp.Header{Op: ring.OpWrite, Seq: 2, Incarnation: 7, Region: 1, Offset: n, Length: n}))
	mustWrite(t, c, bytes.Repeat([]byte{2}, n/2))
	waitApplying(t, b)

	// Another engine may not fence this run.
	if _, err := b.tr.Fence(ctx, "fence-x", 0x77); !errors.Is(err, sdk.ErrFenceNotYours) {
		t.Fatalf("a fence by another engine: %v, want ErrFenceNotYours", err)
	}

	done := make(chan sdk.FenceResult, 1)
	go func() {
		r, err := b.tr.Fence(ctx, "fence-a", 0x77)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	// The rest of the half-applied frame arrives promptly: the frame
	// completes, and only then is the fence confirmed.
	mustWrite(t, c, bytes.Repeat([]byte{2}, n/2))
	r := <-done
	if r.Connections != 1 || !r.Known {
		t.Fatalf("fence: %+v, want the one connection of a known run", r)
	}
	if !bytes.Equal(mem[n:], bytes.Repeat([]byte{2}, n)) {
		t.Fatal("the frame being applied when the fence came did not complete")
	}

	// A frame after the fence is never applied, and the connection ends.
	_, _ = c.Write(header(tcp.Header{Op: ring.OpWrite, Seq: 3, Incarnation: 7, Region: 1, Offset: 0, Length: n}))
	_, _ = c.Write(bytes.Repeat([]byte{3}, n))
	dropped(t, c)
	if mem[0] != 1 || mem[n-1] != 1 {
		t.Fatal("a frame of a fenced run was applied")
	}
	if got := b.stat(t, "fences"); got != 1 {
		t.Errorf("fences = %d, want 1", got)
	}

	// A new connection of the fenced run is refused after its hello.
	c2, _ := runConn(t, b, "fence-a", 0x77)
	_, _ = c2.Write(header(tcp.Header{Op: ring.OpWrite, Seq: 1, Incarnation: 7, Region: 1, Offset: 0, Length: n}))
	_, _ = c2.Write(bytes.Repeat([]byte{4}, n))
	dropped(t, c2)
	if mem[0] != 1 || b.stat(t, "fenced_refused") == 0 {
		t.Fatalf("a new connection of a fenced run was served (fenced_refused %d)", b.stat(t, "fenced_refused"))
	}

	// A run never seen here: fenced all the same, so that its connection,
	// if one is still on its way, is refused.
	if r, err := b.tr.Fence(ctx, "fence-a", 0x99); err != nil || r.Known || r.Connections != 0 {
		t.Fatalf("fence of an unknown run: %+v, %v", r, err)
	}
	c3, _ := runConn(t, b, "fence-a", 0x99)
	_, _ = c3.Write(header(tcp.Header{Op: ring.OpWrite, Seq: 1, Incarnation: 7, Region: 1, Offset: 0, Length: n}))
	_, _ = c3.Write(bytes.Repeat([]byte{5}, n))
	dropped(t, c3)
	if mem[0] != 1 {
		t.Fatal("a connection of a run fenced before it came was served")
	}
	// Run 0 is no run.
	if _, err := b.tr.Fence(ctx, "fence-a", 0); err == nil {
		t.Fatal("a fence of run 0 was taken")
	}
	// Another run of the same engine goes on.
	c4, st := runConn(t, b, "fence-a", 0x78)
	if st != ring.StatusOK {
		t.Fatalf("hello of another run: %s", st)
	}
	mustWrite(t, c4, header(tcp.Header{Op: ring.OpWrite, Seq: 1, Incarnation: 7, Region: 1, Offset: 0, Length: n}))
	mustWrite(t, c4, bytes.Repeat([]byte{6}, n))
	if r := response(t, c4); r.Status != ring.StatusOK || mem[0] != 6 {
		t.Fatalf("a write of another run after the fence: %+v", r)
	}
}

// TestFenceCutsAStuckFrame: a frame half applied whose rest never comes
// (a stopped sender, a dead link) does not hold the fence: its
// connection is cut after the fence's cut time, and nothing more of it
// lands.
func TestFenceCutsAStuckFrame(t *testing.T) {
	const n = 64 << 10
	b := startEngine(t, "fence-c", 7, `listen = ["127.0.0.1:0"]`)
	mem := make([]byte, n)
	b.register(t, 1, mem, sdk.PermRemoteReadWrite)
	c, _ := runConn(t, b, "fence-a", 0x55)
	mustWrite(t, c, header(tcp.Header{Op: ring.OpWrite, Seq: 1, Incarnation: 7, Region: 1, Offset: 0, Length: n}))
	mustWrite(t, c, bytes.Repeat([]byte{1}, n/2))
	waitApplying(t, b)
	if _, err := b.tr.Fence(context.Background(), "fence-a", 0x55); err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write(bytes.Repeat([]byte{2}, n/2))
	dropped(t, c)
	if mem[n/2] == 2 || mem[n-1] == 2 {
		t.Fatal("the rest of a frame cut by a fence landed")
	}
}

// holdProxy forwards connections to target; hold makes the connections
// open now keep what their dialer sends (read, not forwarded) until
// release, which forwards it all. Connections opened later flow.
type holdProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	held   map[*heldConn]bool
}

type heldConn struct {
	mu      sync.Mutex
	hold    bool
	pending [][]byte
	out     net.Conn
	done    chan struct{} // closed once release forwarded everything
}

func newHoldProxy(t *testing.T, target string) *holdProxy {
	t.Helper()
	p := &holdProxy{target: target, held: map[*heldConn]bool{}}
	p.ln = serveLoopback(t, func(c net.Conn, track func(net.Conn) bool) {
		u, err := net.Dial("tcp", target)
		if err != nil {
			c.Close()
			return
		}
		if !track(u) {
			return
		}
		h := &heldConn{out: u, done: make(chan struct{})}
		p.mu.Lock()
		p.held[h] = true
		p.mu.Unlock()
		back := make(chan struct{})
		go func() { defer close(back); io.Copy(c, u) }()
		defer func() { <-back }()
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				h.mu.Lock()
				if h.hold {
					h.pending = append(h.pending, bytes.Clone(buf[:n]))
				} else {
					u.Write(buf[:n])
				}
				h.mu.Unlock()
			}
			if err != nil {
				return
			}
		}
	})
	return p
}

// hold holds the connections open now.
func (p *holdProxy) hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for h := range p.held {
		h.mu.Lock()
		h.hold = true
		h.mu.Unlock()
	}
}

// release forwards what the held connections kept, and returns once it
// was written to the target (or could not be).
func (p *holdProxy) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for h := range p.held {
		h.mu.Lock()
		for _, b := range h.pending {
			h.out.Write(b)
		}
		h.pending, h.hold = nil, false
		h.mu.Unlock()
	}
}

func (p *holdProxy) endpoint() sdk.Endpoint {
	return sdk.Endpoint(fmt.Sprintf(`{"v":1,"addrs":[%q],"from":true}`, p.ln.Addr().String()))
}

// TestGivenUpConnectionIsFenced: a connection the dialer gives up
// (io_timeout: the peer stopped answering) with a write unanswered is
// fenced at the peer before that write completes, so that the write's
// bytes, still on their way, are never applied after a newer write that
// a new connection carried.
func TestGivenUpConnectionIsFenced(t *testing.T) {
	const n = 256 << 10
	b := startEngine(t, "gu-b", 7, `listen = ["127.0.0.1:0"]`)
	a := tcp.New(tcp.WithLogger(hclog.NewNullLogger()))
	if _, err := a.Start(context.Background(), sdk.StartConfig{Engine: "gu-a", Incarnation: 3, Run: 0xabc,
		Config: []byte(`listen = ["127.0.0.1:0"]` + "\n" + `io_timeout = "300ms"` + "\n" + `connections_per_peer = 1`), ConfigFile: "a.hcl", ConfigLine: 1, ConfigColumn: 1}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Stop(context.Background()) })
	var ep struct{ Addrs []string }
	if err := jsonUnmarshal(b.ep, &ep); err != nil {
		t.Fatal(err)
	}
	px := newHoldProxy(t, ep.Addrs[0])
	src, dst := make([]byte, n), make([]byte, n)
	if err := a.RegisterMemory(context.Background(), sdk.Region{ID: 1, Mem: src, Perm: sdk.PermLocal, Kind: "cpu"}); err != nil {
		t.Fatal(err)
	}
	b.register(t, 2, dst, sdk.PermRemoteReadWrite)
	if err := a.OpenPeer(context.Background(), sdk.Peer{ID: 5, Segment: "gu-b", Incarnation: 7, Endpoint: px.endpoint()}); err != nil {
		t.Fatal(err)
	}
	col := plugintest.NewCollector(t)
	tok := uint64(0)
	do := func(seed byte) plugintest.Completion {
		for i := range src {
			src[i] = seed
		}
		tok++
		a.Submit(&ring.Descriptor{Token: tok, Op: ring.OpWrite, Peer: 5, LocalRegion: 1, RemoteRegion: 2, Length: n}, col)
		return col.Wait(tok)
	}
	if c := do(1); c.Status != ring.StatusOK {
		t.Fatalf("first write: %+v", c)
	}
	px.hold()
	if c := do(2); c.Status == ring.StatusOK {
		t.Fatalf("a write whose connection was held completed: %+v", c)
	}
	if c := do(3); c.Status != ring.StatusOK {
		t.Fatalf("the newer write: %+v", c)
	}
	px.release() // the given-up connection's bytes reach the peer now
	// A read of one byte goes after anything the peer had received.
	tok++
	a.Submit(&ring.Descriptor{Token: tok, Op: ring.OpRead, Peer: 5, LocalRegion: 1, RemoteRegion: 2, Length: 1}, col)
	col.Wait(tok)
	if !bytes.Equal(dst, bytes.Repeat([]byte{3}, n)) {
		t.Fatalf("the peer's range does not hold the newest completed write (byte 0 is %d)", dst[0])
	}
	m, _ := a.Stats(context.Background())
	if m["conns_fenced"] != 1 || b.stat(t, "fences") != 1 {
		t.Errorf("conns_fenced %d at the dialer, fences %d at the peer; want 1 and 1", m["conns_fenced"], b.stat(t, "fences"))
	}
}

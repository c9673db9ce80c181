package tcp_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
)

// gate is a proxy whose first connection's dialer-to-listener direction
// can be held: while held it forwards nothing more on it, so a frame
// being written there cannot finish. Every other connection, and every
// listener-to-dialer direction, flows freely.
type gate struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cond   *sync.Cond
	held   bool
	n      int // connections accepted
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newGate(t *testing.T, target string) *gate {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{ln: ln, target: target}
	g.cond = sync.NewCond(&g.mu)
	g.wg.Add(1)
	go g.accept()
	t.Cleanup(g.close)
	return g
}

func (g *gate) accept() {
	defer g.wg.Done()
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", g.target)
		if err != nil {
			c.Close()
			continue
		}
		g.mu.Lock()
		first := g.n == 0
		g.n++
		g.conns = append(g.conns, c, u)
		g.mu.Unlock()
		g.wg.Add(2)
		go func() { defer g.wg.Done(); g.forward(u, c, first); u.Close(); c.Close() }()
		go func() { defer g.wg.Done(); io.Copy(c, u); u.Close(); c.Close() }()
	}
}

// forward copies src to dst; on the first connection it waits before each
// write while the gate is held.
func (g *gate) forward(dst, src net.Conn, gated bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && gated {
			g.mu.Lock()
			for g.held {
				g.cond.Wait()
			}
			g.mu.Unlock()
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (g *gate) hold(on bool) {
	g.mu.Lock()
	g.held = on
	g.mu.Unlock()
	g.cond.Broadcast()
}

func (g *gate) accepted() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

func (g *gate) close() {
	g.ln.Close()
	g.hold(false)
	g.mu.Lock()
	for _, c := range g.conns {
		c.Close()
	}
	g.mu.Unlock()
	g.wg.Wait()
}

func (g *gate) endpoint() sdk.Endpoint {
	return sdk.Endpoint(fmt.Sprintf(`{"v":1,"addrs":[%q]}`, g.ln.Addr().String()))
}

// TestHighPriorityBesideBulk: a high-priority 4 KiB read completes while
// a 64 MiB low-priority write to the same peer cannot finish (its
// connection is held mid-frame), and the write completes once the link
// flows again. With one bulk connection per peer the read would queue
// behind the write (it did before high-priority descriptors had a
// connection of their own); with priority_connection = false it still
// shares the bulk connection.
func TestHighPriorityBesideBulk(t *testing.T) {
	const bulk = 64 << 20
	w := newWorld(t, bulk, "connections_per_peer = 1")
	fill(w.src, 21)
	var bAddr struct{ Addrs []string }
	if err := jsonUnmarshal(w.b.ep, &bAddr); err != nil {
		t.Fatal(err)
	}
	g := newGate(t, bAddr.Addrs[0])
	const via = 21
	if err := w.a.tr.OpenPeer(context.Background(), sdk.Peer{ID: via, Segment: "engine-b", Incarnation: 200, Endpoint: g.endpoint()}); err != nil {
		t.Fatal(err)
	}
	prio := func(d ring.Descriptor, p sdk.Priority) ring.Descriptor { d.Peer, d.Prio = via, uint8(p); return d }

	// Open the bulk connection, then hold it.
	if got := w.do(t, prio(write(aSrc, 0, bRW, 0, 4096), sdk.PriorityLow)); got.Status != ring.StatusOK {
		t.Fatalf("first low write: %v", got.Status)
	}
	g.hold(true)
	low := w.submit(prio(write(aSrc, 0, bRW, 0, bulk), sdk.PriorityLow))
	high := w.do(t, prio(read(aDst, 0, bRO, 100, 4096), sdk.PriorityHigh))
	if high.Status != ring.StatusOK || high.N != 4096 {
		t.Fatalf("high read beside a held low write: %v (%d bytes), want OK (4096)", high.Status, high.N)
	}
	plugintest.MustEqual(t, "high read", w.dst[:4096], w.ro[100:4196])
	if n := w.col.Count(); n != 2 {
		t.Fatalf("%d descriptors completed while the low write was held, want 2 (the first write and the high read)", n)
	}
	if got := w.a.stat(t, "ops_priority"); got != 1 {
		t.Errorf("ops_priority = %d, want 1", got)
	}
	if got := g.accepted(); got != 2 {
		t.Errorf("the peer accepted %d connections, want 2 (bulk and high priority)", got)
	}
	g.hold(false)
	if got := w.col.Wait(low); got.Status != ring.StatusOK || got.N != bulk {
		t.Fatalf("low write after the link flows again: %v (%d bytes)", got.Status, got.N)
	}
	plugintest.MustEqual(t, "low write", w.rw, w.src)
	// A second high-priority read reuses the connection.
	if got := w.do(t, prio(read(aDst, 0, bRO, 0, 4096), sdk.PriorityHigh)); got.Status != ring.StatusOK {
		t.Fatalf("second high read: %v", got.Status)
	}
	if got := g.accepted(); got != 2 {
		t.Errorf("after a second high read the peer accepted %d connections, want 2", got)
	}
}

// TestPriorityConnectionOff: with priority_connection = false a
// high-priority descriptor goes on the bulk connection (no second
// connection is dialed) and completes as any other.
func TestPriorityConnectionOff(t *testing.T) {
	w := newWorld(t, 1<<16, "connections_per_peer = 1\npriority_connection = false")
	for _, p := range []sdk.Priority{sdk.PriorityLow, sdk.PriorityHigh, sdk.PriorityNormal} {
		d := read(aDst, 0, bRO, 0, 4096)
		d.Prio = uint8(p)
		if got := w.do(t, d); got.Status != ring.StatusOK {
			t.Fatalf("%v read: %v", p, got.Status)
		}
	}
	plugintest.MustEqual(t, "reads", w.dst[:4096], w.ro[:4096])
	if got := w.a.stat(t, "conns_dialed"); got != 1 {
		t.Errorf("conns_dialed = %d, want 1", got)
	}
	if got := w.a.stat(t, "ops_priority"); got != 0 {
		t.Errorf("ops_priority = %d, want 0", got)
	}
}

//go:build unix

package tcp_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/ferrydev/ferry/plugins/tcp"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
)

// floodSize returns how many connections a test may open, up to want,
// raising the soft limit on open files if it is lower than that needs.
func floodSize(t *testing.T, want int) int {
	t.Helper()
	const spare = 1024 // for the engines, the listener side and the test binary
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatalf("getrlimit: %v", err)
	}
	if need := uint64(want + spare); lim.Cur < need && lim.Cur < lim.Max {
		old := lim
		lim.Cur = min(need, lim.Max)
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Logf("setrlimit: %v", err)
			lim = old
		} else {
			t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
		}
	}
	n := min(want, int(lim.Cur)-spare)
	if n < 300 {
		t.Skipf("only %d open files allowed", lim.Cur)
	}
	return n
}

// expectEOF reads from c until the engine closes it; it must send nothing.
func expectEOF(t *testing.T, what string, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(waitLimit))
	var b [1]byte
	if n, err := c.Read(b[:]); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("%s: read %d bytes, %v; want the engine to close it (EOF)", what, n, err)
	}
}

// TestIdleConnectionFlood opens thousands of connections from one host
// that never say anything, while a peer on another host keeps writing and
// a new peer connects in the middle of it.
func TestIdleConnectionFlood(t *testing.T) {
	const perHost = 64
	n := floodSize(t, 2000)
	logB := newLogSink()
	configB := fmt.Sprintf("max_connections = 256\nmax_connections_per_host = %d\nhandshake_timeout = \"1s\"", perHost)
	w := newLoggedWorld(t, 1<<20, "", configB, newLogSink(), logB)
	fill(w.src, 1)
	legit := func(i int, peer uint32) {
		t.Helper()
		off := uint64(i%200) * 4096
		d := write(aSrc, off, bRW, off, 4096)
		d.Peer = peer
		if got := w.do(t, d); got.Status != ring.StatusOK {
			t.Fatalf("legitimate write %d (peer %d): %v", i, peer, got.Status)
		}
		plugintest.MustEqual(t, "written", w.rw[off:off+4096], w.src[off:off+4096])
	}
	legit(0, peerB)

	var ep struct{ Addrs []string }
	if err := jsonUnmarshal(w.b.ep, &ep); err != nil {
		t.Fatal(err)
	}
	// The flood comes from 127.0.0.2; engine A dials from 127.0.0.1.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	flood := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range flood {
			c.Close()
		}
	})
	start := time.Now()
	for i := range n {
		c, err := d.Dial("tcp", ep.Addrs[0])
		if err != nil {
			if i == 0 {
				t.Skipf("cannot dial from 127.0.0.2: %v", err)
			}
			t.Fatalf("flood connection %d: %v", i, err)
		}
		flood = append(flood, c)
		if i%100 == 99 {
			legit(i, peerB)
		}
		if i == n/2 {
			w.a.open(t, peerB+1, w.b)
			legit(i, peerB+1)
		}
	}
	// B never holds more than its limit for the flooding host (and A's
	// connections: two per peer).
	if open := w.b.stat(t, "conns_open"); open > perHost+4 {
		t.Errorf("B holds %d connections, want at most %d", open, perHost+4)
	}
	// B closes every idle connection: the oldest shed as new ones come
	// over the host's limit, the others at handshake_timeout.
	for i, c := range flood {
		expectEOF(t, fmt.Sprintf("flood connection %d", i), c)
	}
	elapsed := time.Since(start)
	shed, timedOut := w.b.stat(t, "conns_shed"), w.b.stat(t, "conns_handshake_timeout")
	if shed == 0 || timedOut < perHost || shed+timedOut != uint64(n) {
		t.Errorf("conns_shed %d + conns_handshake_timeout %d, want both counted and %d in all", shed, timedOut, n)
	}
	// Each kind of event was logged, at most once a second.
	most := int(elapsed/time.Second) + 1
	for _, what := range []string{"shedding the oldest unauthenticated connection", "did not finish their hello within handshake_timeout"} {
		if lines := logB.count(what); lines == 0 || lines > most {
			t.Errorf("%d log lines %q in %s, want 1..%d", lines, what, elapsed, most)
		}
	}
	legit(n, peerB)
	legit(n+1, peerB+1)
	if n := w.a.stat(t, "ops_failed"); n != 0 {
		t.Errorf("A: ops_failed = %d", n)
	}
}

// TestMaxConnections fills max_connections with authenticated idle
// connections: the next ones, a real peer's included, are refused at once
// when they authenticate, until a place is free again.
func TestMaxConnections(t *testing.T) {
	logB := newLogSink()
	w := newLoggedWorld(t, 1<<20, "", "max_connections = 4\nhandshake_timeout = \"1h\"", newLogSink(), logB)
	// authed says hello and sends a first request: without a cluster
	// secret, that is what authenticates a connection.
	authed := func(c *net.TCPConn) {
		t.Helper()
		goodHello(t, c, w.b)
		mustWrite(t, c, header(tcp.Header{Op: ring.OpRead, Seq: 1, Incarnation: w.b.incarnation, Region: bRW, Length: 1}))
	}
	idle := make([]*net.TCPConn, 4)
	for i := range idle {
		idle[i] = dialRaw(t, w.b)
		authed(idle[i])
		if r := response(t, idle[i]); r.Status != ring.StatusOK {
			t.Fatalf("connection %d: %+v", i, r)
		}
		var b [1]byte
		if _, err := io.ReadFull(idle[i], b[:]); err != nil {
			t.Fatalf("connection %d: payload: %v", i, err)
		}
	}
	fifth := dialRaw(t, w.b)
	authed(fifth)
	expectEOF(t, "the fifth connection", fifth)
	if n := w.b.stat(t, "conns_refused_limit"); n != 1 {
		t.Errorf("conns_refused_limit = %d, want 1", n)
	}
	if got := w.do(t, write(aSrc, 0, bRW, 0, 100)); got.Status != ring.StatusPeerUnreachable {
		t.Errorf("write while B is full: %v, want %v", got.Status, ring.StatusPeerUnreachable)
	}
	if n := w.b.stat(t, "conns_refused_limit"); n < 2 {
		t.Errorf("conns_refused_limit = %d, want A's connection counted", n)
	}
	if logB.count("refusing authenticated connections over max_connections", "max_connections=4") == 0 {
		t.Errorf("no log line about the refusals:\n%s", logB)
	}
	// An idle connection that goes away frees its place.
	for i, c := range idle {
		c.CloseWrite()
		expectEOF(t, fmt.Sprintf("idle connection %d", i), c)
	}
	fill(w.src[:100], 7)
	if got := w.do(t, write(aSrc, 0, bRW, 0, 100)); got.Status != ring.StatusOK {
		t.Fatalf("write after the idle connections left: %v", got.Status)
	}
	plugintest.MustEqual(t, "written", w.rw[:100], w.src[:100])
}

//go:build unix

package tcp_test

import (
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ferrydev/ferry/plugins/tcp"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Admission before authentication (issue 11, item 5): connections that
// do not authenticate have their own budget, and a flood of them cannot
// keep a real peer out.

// floodHello says hello to e as a flooder that means to go no further:
// the hello is well formed (with a nonce when secret is set) and the
// reply is read, then nothing more is sent. It reports whether the reply
// came (a listener that refuses the connection closes it instead).
func floodHello(t *testing.T, c net.Conn, e *engine, secret bool) bool {
	t.Helper()
	h := tcp.Hello{Version: tcp.ProtocolVersion, Incarnation: e.incarnation, Segment: e.name}
	n := tcp.HelloReplySize
	if secret {
		h.Flags = tcp.FlagAuth
		_, _ = rand.Read(h.Nonce[:])
		n += tcp.ProofSize
	}
	mustWrite(t, c, tcp.AppendHello(nil, h))
	b := make([]byte, n)
	_, err := io.ReadFull(c, b)
	return err == nil
}

// TestPreAuthFlood holds hundreds of connections that never authenticate
// (some silent, most after a good hello, 300 of them from 127.0.0.1, the
// address every same-host peer shares, the others from 16 more loopback
// addresses) and a slowloris that dribbles a hello byte by byte, while 20
// new peers connect from 127.0.0.1 and write. Every peer gets in; the
// listener holds no more unauthenticated connections than max_startups'
// full (default 256) and sheds the rest. handshake_timeout is an hour, so
// nothing here is saved by the timeout.
func TestPreAuthFlood(t *testing.T) {
	for _, tc := range []struct {
		name, config string
		secret       bool
	}{
		{"no secret", `handshake_timeout = "1h"`, false},
		{"cluster secret", `handshake_timeout = "1h"` + "\ncluster_secret = \"" + secretX + "\"", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const sameHost, slow, peers, full = 300, 30, 20, 256
			n := floodSize(t, 640) - sameHost - slow // from the other addresses
			w := newWorld(t, 1<<20, tc.config)
			fill(w.src, 3)
			var ep struct{ Addrs []string }
			if err := jsonUnmarshal(w.b.ep, &ep); err != nil {
				t.Fatal(err)
			}
			var conns []net.Conn
			var mu sync.Mutex
			t.Cleanup(func() {
				mu.Lock()
				defer mu.Unlock()
				for _, c := range conns {
					c.Close()
				}
			})
			dial := func(from net.IP) net.Conn {
				t.Helper()
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from}}
				c, err := d.Dial("tcp", ep.Addrs[0])
				if err != nil {
					t.Fatalf("flood connection from %s: %v", from, err)
				}
				_ = c.SetDeadline(time.Now().Add(waitLimit)) // a safety net
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
				return c
			}
			refused := 0 // flood connections closed before their hello's reply
			for i := range sameHost + n {
				from := net.IPv4(127, 0, 0, 1)
				if i >= sameHost {
					from = net.IPv4(127, 0, 0, byte(2+i%16))
				}
				c := dial(from)
				if i%5 != 0 && !floodHello(t, c, w.b, tc.secret) { // one in five says nothing at all
					refused++
				}
			}
			// The slowloris: each connection gets one more byte of a good
			// hello every few milliseconds, until the peers are done.
			h := tcp.Hello{Version: tcp.ProtocolVersion, Incarnation: w.b.incarnation, Segment: w.b.name}
			if tc.secret {
				h.Flags = tcp.FlagAuth
			}
			hb := tcp.AppendHello(nil, h)
			lorises := make([]net.Conn, slow)
			for i := range lorises {
				lorises[i] = dial(net.IPv4(127, 0, 0, 1))
			}
			stop := make(chan struct{})
			var dribbler sync.WaitGroup
			dribbler.Add(1)
			go func() {
				defer dribbler.Done()
				tick := time.NewTicker(3 * time.Millisecond)
				defer tick.Stop()
				for at := 0; at < len(hb)-1; at++ { // never the last byte
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					for _, c := range lorises {
						_, _ = c.Write(hb[at : at+1]) // a shed one fails: fine
					}
				}
				<-stop
			}()
			for i := range peers {
				id := peerB + 1 + uint32(i)
				w.a.open(t, id, w.b)
				off := uint64(i) * 4096
				d := write(aSrc, off, bRW, off, 4096)
				d.Peer = id
				if got := w.do(t, d); got.Status != ring.StatusOK {
					t.Errorf("new peer %d during the flood: %v", i, got.Status)
					continue
				}
				plugintest.MustEqual(t, fmt.Sprintf("peer %d's write", i), w.rw[off:off+4096], w.src[off:off+4096])
			}
			close(stop)
			dribbler.Wait()
			if refused > 0 {
				t.Logf("%d flood connections were closed before their hello's reply", refused)
			}

			total := uint64(sameHost + n + slow)
			if shed := w.b.stat(t, "conns_shed"); shed+full < total {
				t.Errorf("conns_shed = %d of %d flood connections, want all but at most %d", shed, total, full)
			}
			// What B holds: at most full unauthenticated ones, and A's.
			if open := w.b.stat(t, "conns_open"); open > full+2*peers {
				t.Errorf("B holds %d connections, want at most %d", open, full+2*peers)
			}
			if failed := w.a.stat(t, "ops_failed"); failed != 0 {
				t.Errorf("A: ops_failed = %d", failed)
			}
		})
	}
}

// TestHandshakeTimeoutAfterHello: a connection that says hello and then
// nothing is closed at handshake_timeout, with or without a cluster secret
// (without one, its first request is what it must send in time); one that
// authenticated stays open past it.
func TestHandshakeTimeoutAfterHello(t *testing.T) {
	for _, tc := range []struct {
		name, config string
		secret       bool
	}{
		{"no secret", `handshake_timeout = "200ms"`, false},
		{"cluster secret", `handshake_timeout = "200ms"` + "\ncluster_secret = \"" + secretX + "\"", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startEngine(t, "engine-b", 200, tc.config)
			mem := make([]byte, 4096)
			b.register(t, bRW, mem, 3)
			var done *net.TCPConn // authenticated before the idle one was accepted
			if !tc.secret {
				done = dialRaw(t, b)
				goodHello(t, done, b)
				mustWrite(t, done, header(tcp.Header{Op: ring.OpRead, Seq: 1, Incarnation: b.incarnation, Region: bRW, Length: 1}))
				readResponse(t, done, ring.StatusOK, 1)
			}
			before := b.stat(t, "conns_handshake_timeout")
			idle := dialRaw(t, b)
			if !floodHello(t, idle, b, tc.secret) {
				t.Fatal("no reply to the hello")
			}
			expectEOF(t, "the connection idle after its hello", idle)
			if got := b.stat(t, "conns_handshake_timeout"); got != before+1 {
				t.Errorf("conns_handshake_timeout went from %d to %d, want +1", before, got)
			}
			if done != nil {
				mustWrite(t, done, header(tcp.Header{Op: ring.OpRead, Seq: 2, Incarnation: b.incarnation, Region: bRW, Length: 1}))
				readResponse(t, done, ring.StatusOK, 1)
			}
		})
	}
}

func readResponse(t *testing.T, c net.Conn, want ring.Status, payload int) {
	t.Helper()
	if r := response(t, c); r.Status != want || r.Length != uint64(payload) {
		t.Fatalf("response %+v, want %v with %d bytes", r, want, payload)
	}
	if _, err := io.ReadFull(c, make([]byte, payload)); err != nil {
		t.Fatalf("payload: %v", err)
	}
}

// TestRefusalRevealsNothing: a hello that is refused, before the dialer
// has authenticated, learns neither the listener's incarnation nor its
// max_frame.
func TestRefusalRevealsNothing(t *testing.T) {
	open := startEngine(t, "engine-b", 200, "")
	closed := startEngine(t, "engine-c", 300, `cluster_secret = "`+secretX+`"`)
	cases := []struct {
		name string
		to   *engine
		h    tcp.Hello
		want ring.Status
	}{
		{"stale incarnation", open, tcp.Hello{Version: tcp.ProtocolVersion, Incarnation: 1, Segment: "engine-b"}, ring.StatusStaleIncarnation},
		{"another segment", open, tcp.Hello{Version: tcp.ProtocolVersion, Incarnation: 200, Segment: "engine-x"}, ring.StatusStaleIncarnation},
		{"another version", open, tcp.Hello{Version: tcp.ProtocolVersion + 1, Incarnation: 200, Segment: "engine-b"}, ring.StatusProtocol},
		{"no secret", closed, tcp.Hello{Version: tcp.ProtocolVersion, Incarnation: 300, Segment: "engine-c"}, ring.StatusPermission},
		{"stale, with a secret", closed, tcp.Hello{Version: tcp.ProtocolVersion, Flags: tcp.FlagAuth, Incarnation: 1, Segment: "engine-c"}, ring.StatusStaleIncarnation},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, tc.to)
			r := hello(t, c, tc.h)
			if r.Status != tc.want {
				t.Errorf("status %v, want %v", r.Status, tc.want)
			}
			if r.Incarnation != 0 || r.MaxFrame != 0 {
				t.Errorf("refusal %+v reveals incarnation %d and max_frame %d, want 0 and 0", r, r.Incarnation, r.MaxFrame)
			}
			expectEOF(t, "the refused connection", c)
		})
	}
}

// TestMaxConnectionsPerPeer: max_connections_per_peer counts a
// connection against the engine its dialer names in the hello (or, when
// it names none, its IP address), so a peer that uses up its share from
// 127.0.0.1 keeps no other same-host peer out.
func TestMaxConnectionsPerPeer(t *testing.T) {
	logB := newLogSink()
	w := newLoggedWorld(t, 1<<20, "", "max_connections_per_peer = 2\nhandshake_timeout = \"1h\"", newLogSink(), logB)
	// conn says hello as from (nobody when empty) and sends a first
	// request, which authenticates it without a cluster secret.
	conn := func(from string) *net.TCPConn {
		t.Helper()
		c := dialRaw(t, w.b)
		h := tcp.Hello{Version: tcp.ProtocolVersion, Incarnation: w.b.incarnation, Segment: w.b.name}
		if from != "" {
			h.Flags, h.From = tcp.FlagFrom, from
		}
		if r := hello(t, c, h); r.Status != ring.StatusOK {
			t.Fatalf("hello from %q: %+v", from, r)
		}
		mustWrite(t, c, header(tcp.Header{Op: ring.OpRead, Seq: 1, Incarnation: w.b.incarnation, Region: bRW, Length: 1}))
		return c
	}
	for _, from := range []string{"mallory", ""} {
		for range 2 {
			readResponse(t, conn(from), ring.StatusOK, 1)
		}
		refused := w.b.stat(t, "conns_refused_limit")
		expectEOF(t, fmt.Sprintf("a third connection from %q", from), conn(from))
		if got := w.b.stat(t, "conns_refused_limit"); got != refused+1 {
			t.Errorf("conns_refused_limit went from %d to %d, want +1", refused, got)
		}
	}
	if logB.count("refusing authenticated connections over max_connections", `peer="engine mallory"`, "max_connections_per_peer=2") == 0 {
		t.Errorf("no log line naming the peer:\n%s", logB)
	}
	// engine-a dials from 127.0.0.1 too, and names itself: it gets in.
	fill(w.src[:4096], 5)
	if got := w.do(t, write(aSrc, 0, bRW, 0, 4096)); got.Status != ring.StatusOK {
		t.Fatalf("engine-a's write: %v", got.Status)
	}
	plugintest.MustEqual(t, "written", w.rw[:4096], w.src[:4096])
}

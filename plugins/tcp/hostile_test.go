package tcp_test

import (
	"bytes"
	"errors"
	"io"
	"math"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ferrydev/ferry/plugins/tcp"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
)

func dialRaw(t *testing.T, e *engine) *net.TCPConn {
	t.Helper()
	var ep struct{ Addrs []string }
	if err := jsonUnmarshal(e.ep, &ep); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", ep.Addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(waitLimit)) // a safety net, not a synchronisation
	return c.(*net.TCPConn)
}

func mustWrite(t *testing.T, c net.Conn, b []byte) {
	t.Helper()
	if _, err := c.Write(b); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// hello sends a hello and returns the reply.
func hello(t *testing.T, c net.Conn, h tcp.Hello) tcp.HelloReply {
	t.Helper()
	mustWrite(t, c, tcp.AppendHello(nil, h))
	var b [tcp.HelloReplySize]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		t.Fatalf("hello reply: %v", err)
	}
	r, err := tcp.DecodeHelloReply(b[:])
	if err != nil {
		t.Fatalf("hello reply: %v", err)
	}
	return r
}

func goodHello(t *testing.T, c net.Conn, e *engine) {
	t.Helper()
	r := hello(t, c, tcp.Hello{Version: tcp.ProtocolVersion, Incarnation: e.incarnation, Segment: e.name})
	if r.Status != ring.StatusOK || r.Incarnation != e.incarnation || r.Version != tcp.ProtocolVersion {
		t.Fatalf("hello refused: %+v", r)
	}
}

func header(h tcp.Header) []byte {
	b := make([]byte, tcp.RequestSize)
	tcp.EncodeHeader(b, &h)
	return b
}

func response(t *testing.T, c net.Conn) tcp.Response {
	t.Helper()
	var b [tcp.ResponseSize]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		t.Fatalf("response: %v", err)
	}
	var r tcp.Response
	if err := tcp.DecodeResponse(b[:], &r); err != nil {
		t.Fatalf("response: %v", err)
	}
	return r
}

// dropped waits until the engine closes c (it reads and throws away
// anything the engine still sends, such as a hello reply).
func dropped(t *testing.T, c net.Conn) {
	t.Helper()
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection not dropped within %s", waitLimit)
	}
}

func TestHostilePeers(t *testing.T) {
	const maxFrame = 64 << 10
	w := newWorld(t, 1<<20, `max_frame = "64KiB"`)
	const bGood, bScratch = 13, 14
	good, scratch := make([]byte, 1<<20), make([]byte, 1<<16)
	w.b.register(t, bGood, good, sdk.PermRemoteReadWrite)
	w.b.register(t, bScratch, scratch, sdk.PermRemoteReadWrite)
	fill(w.src, 21)
	fill(w.rw, 22)
	rw, ro, local := snapshot(w.rw), snapshot(w.ro), snapshot(w.local)

	// A good peer keeps writing while the hostile ones come and go.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	goodDone := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := uint64(0); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			off := (i * 4099) % (1<<20 - maxFrame)
			got := w.do(t, write(aSrc, off, bGood, off, 4099))
			if got.Status != ring.StatusOK {
				t.Errorf("good write %d: %v", i, got.Status)
				return
			}
			if !bytes.Equal(good[off:off+4099], w.src[off:off+4099]) {
				t.Errorf("good write %d: bytes differ", i)
				return
			}
			goodDone++
		}
	}()

	good1 := tcp.Header{Op: ring.OpWrite, Seq: 1, Incarnation: w.b.incarnation, Region: bScratch, Offset: 0, Length: 100}
	cases := []struct {
		name    string
		counter string
		run     func(t *testing.T, c *net.TCPConn)
	}{
		{"garbage instead of hello", "conns_dropped_malformed", func(t *testing.T, c *net.TCPConn) {
			mustWrite(t, c, bytes.Repeat([]byte("GET / HTTP/1.1\r\n"), 10))
		}},
		{"frame before hello", "conns_dropped_malformed", func(t *testing.T, c *net.TCPConn) {
			mustWrite(t, c, header(good1))
		}},
		{"hello with an oversized name", "conns_dropped_malformed", func(t *testing.T, c *net.TCPConn) {
			b := tcp.AppendHello(nil, tcp.Hello{Version: 1, Incarnation: 200, Segment: "engine-b"})
			b[6], b[7] = 0xff, 0xff
			mustWrite(t, c, b)
		}},
		{"hello with a bad checksum", "conns_dropped_malformed", func(t *testing.T, c *net.TCPConn) {
			b := tcp.AppendHello(nil, tcp.Hello{Version: 1, Incarnation: 200, Segment: "engine-b"})
			b[len(b)-1] ^= 1
			mustWrite(t, c, b)
		}},
		{"hello with unknown flags", "conns_dropped_malformed", func(t *testing.T, c *net.TCPConn) {
			mustWrite(t, c, tcp.AppendHello(nil, tcp.Hello{Version: 1, Flags: 1 << 7, Incarnation: 200, Segment: "engine-b"}))
		}},
		{"hello with an authentication nonce cut short", "conns_dropped_truncated", func(t *testing.T, c *net.TCPConn) {
			b := tcp.AppendHello(nil, tcp.Hello{Version: 1, Flags: tcp.FlagAuth, Incarnation: 200, Segment: "engine-b"})
			mustWrite(t, c, b[:len(b)-1])
			c.CloseWrite()
		}},
		{"truncated hello", "conns_dropped_truncated", func(t *testing.T, c *net.TCPConn) {
			mustWrite(t, c, tcp.AppendHello(nil, tcp.Hello{Version: 1, Incarnation: 200, Segment: "engine-b"})[:10])
			c.CloseWrite()
		}},
		{"hello of another version", "hello_rejected", func(t *testing.T, c *net.TCPConn) {
			if r := hello(t, c, tcp.Hello{Version: 2, Incarnation: 200, Segment: "engine-b"}); r.Status != ring.StatusProtocol {
				t.Errorf("status %v, want %v", r.Status, ring.StatusProtocol)
			}
		}},
		{"hello with a stale incarnation", "hello_rejected", func(t *testing.T, c *net.TCPConn) {
			if r := hello(t, c, tcp.Hello{Version: 1, Incarnation: 199, Segment: "engine-b"}); r.Status != ring.StatusStaleIncarnation {
				t.Errorf("status %v, want %v", r.Status, ring.StatusStaleIncarnation)
			}
		}},
		{"garbage header", "conns_dropped_malformed", func(t *testing.T, c *net.TCPConn) {
			goodHello(t, c, w.b)
			mustWrite(t, c, bytes.Repeat([]byte{0xa5}, tcp.RequestSize))
		}},
		{"header with a bad checksum", "conns_dropped_malformed", func(t *testing.T, c *net.TCPConn) {
			goodHello(t, c, w.b)
			h := header(good1)
			h[40] ^= 0x80 // the length, now huge, but the checksum gives it away
			mustWrite(t, c, h)
		}},
		{"header with a length over max_frame", "conns_dropped_malformed", func(t *testing.T, c *net.TCPConn) {
			goodHello(t, c, w.b)
			h := good1
			h.Region, h.Length = bRW, maxFrame+1
			mustWrite(t, c, header(h))
		}},
		{"read with a length over max_frame", "conns_dropped_malformed", func(t *testing.T, c *net.TCPConn) {
			goodHello(t, c, w.b)
			h := good1
			h.Op, h.Region, h.Length = ring.OpRead, bRW, math.MaxUint64
			mustWrite(t, c, header(h))
		}},
		{"truncated header", "conns_dropped_truncated", func(t *testing.T, c *net.TCPConn) {
			goodHello(t, c, w.b)
			mustWrite(t, c, header(good1)[:20])
			c.CloseWrite()
		}},
		{"truncated payload", "conns_dropped_truncated", func(t *testing.T, c *net.TCPConn) {
			goodHello(t, c, w.b)
			mustWrite(t, c, header(good1))
			mustWrite(t, c, make([]byte, 50))
			c.CloseWrite()
		}},
		{"truncated payload of a rejected write", "conns_dropped_truncated", func(t *testing.T, c *net.TCPConn) {
			goodHello(t, c, w.b)
			h := good1
			h.Region = bRO
			mustWrite(t, c, header(h))
			mustWrite(t, c, make([]byte, 50))
			c.CloseWrite()
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := w.b.stat(t, tc.counter)
			c := dialRaw(t, w.b)
			tc.run(t, c)
			dropped(t, c)
			if after := w.b.stat(t, tc.counter); after != before+1 {
				t.Errorf("%s went from %d to %d, want +1", tc.counter, before, after)
			}
		})
	}

	t.Run("rejections keep the stream in sync", func(t *testing.T) {
		c := dialRaw(t, w.b)
		goodHello(t, c, w.b)
		payload := make([]byte, 100)
		fill(payload, 31)
		seq := uint64(0)
		ask := func(h tcp.Header, body []byte, want ring.Status) tcp.Response {
			t.Helper()
			seq++
			h.Seq = seq
			mustWrite(t, c, header(h))
			if body != nil {
				mustWrite(t, c, body)
			}
			r := response(t, c)
			if r.Seq != seq || r.Status != want {
				t.Fatalf("%+v: response %+v, want seq %d status %v", h, r, seq, want)
			}
			return r
		}
		inc := w.b.incarnation
		wr := func(region uint32, off, n uint64) tcp.Header {
			return tcp.Header{Op: ring.OpWrite, Incarnation: inc, Region: region, Offset: off, Length: n}
		}
		rd := func(region uint32, off, n uint64) tcp.Header {
			return tcp.Header{Op: ring.OpRead, Incarnation: inc, Region: region, Offset: off, Length: n}
		}
		stale := wr(bRW, 0, 100)
		stale.Incarnation = inc + 1
		ask(stale, payload, ring.StatusStaleIncarnation)
		ask(wr(bRW, math.MaxUint64-3, 100), payload, ring.StatusOutOfBounds)
		ask(wr(bRW, uint64(len(w.rw))-99, 100), payload, ring.StatusOutOfBounds)
		ask(wr(99, 0, 100), payload, ring.StatusNotRegistered)
		ask(wr(bRO, 0, 100), payload, ring.StatusPermission)
		ask(wr(bLocal, 0, 100), payload, ring.StatusPermission)
		ask(wr(bRW, 0, 0), []byte{}, ring.StatusInvalid)
		ask(rd(bLocal, 0, 100), nil, ring.StatusPermission)
		ask(rd(bRW, math.MaxUint64, 1), nil, ring.StatusOutOfBounds)
		ask(rd(99, 0, 1), nil, ring.StatusNotRegistered)
		// Still framed correctly: a good write and a good read go through.
		ask(wr(bScratch, 7, 100), payload, ring.StatusOK)
		plugintest.MustEqual(t, "scratch after write", scratch[7:107], payload)
		r := ask(rd(bRO, 3, 64), nil, ring.StatusOK)
		got := make([]byte, r.Length)
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatal(err)
		}
		plugintest.MustEqual(t, "read payload", got, w.ro[3:67])
	})

	// The same in one burst: the listener reads the frames after a small
	// one ahead (ahead.go), so rejected payloads are discarded from its
	// buffer and the good frames' bytes come out of it, around a payload
	// over aheadSmall read straight into place.
	t.Run("a burst of rejections and writes read ahead", func(t *testing.T) {
		c := dialRaw(t, w.b)
		goodHello(t, c, w.b)
		inc := w.b.incarnation
		type frame struct {
			h    tcp.Header
			body []byte
			want ring.Status
		}
		var frames []frame
		expect := snapshot(scratch)
		add := func(op ring.Op, region uint32, off, n uint64, want ring.Status) {
			f := frame{h: tcp.Header{Op: op, Seq: uint64(len(frames) + 1), Incarnation: inc, Region: region, Offset: off, Length: n}, want: want}
			if op == ring.OpWrite {
				f.body = make([]byte, n)
				fill(f.body, uint64(len(frames))+40)
				if want == ring.StatusOK {
					copy(expect[off:], f.body)
				}
			}
			frames = append(frames, f)
		}
		add(ring.OpWrite, bScratch, 0, 4096, ring.StatusOK)
		add(ring.OpWrite, 99, 0, 5000, ring.StatusNotRegistered)
		add(ring.OpWrite, bScratch, 4096, 3000, ring.StatusOK)
		add(ring.OpWrite, bRO, 0, 7000, ring.StatusPermission)
		add(ring.OpRead, bRO, 11, 2000, ring.StatusOK)
		add(ring.OpWrite, bScratch, 8000, 20000, ring.StatusOK) // over aheadSmall
		add(ring.OpWrite, bScratch, 30000, 1, ring.StatusOK)
		add(ring.OpWrite, bScratch, 1<<16-40000, 40000, ring.StatusOK) // overwrites some of the above
		add(ring.OpWrite, bScratch, 100, 17, ring.StatusOK)
		var burst []byte
		for _, f := range frames {
			burst = append(burst, header(f.h)...)
			burst = append(burst, f.body...)
		}
		mustWrite(t, c, burst)
		for _, f := range frames {
			r := response(t, c)
			if r.Seq != f.h.Seq || r.Status != f.want {
				t.Fatalf("frame %d (%+v): response %+v, want status %v", f.h.Seq, f.h, r, f.want)
			}
			if f.h.Op == ring.OpRead {
				got := make([]byte, r.Length)
				if _, err := io.ReadFull(c, got); err != nil {
					t.Fatal(err)
				}
				plugintest.MustEqual(t, "read payload in the burst", got, w.ro[11:2011])
			}
		}
		plugintest.MustEqual(t, "scratch after the burst", scratch, expect)
	})

	close(stop)
	wg.Wait()
	plugintest.MustEqual(t, "B's read-write region", w.rw, rw)
	plugintest.MustEqual(t, "B's read-only region", w.ro, ro)
	plugintest.MustEqual(t, "B's local region", w.local, local)
	if goodDone == 0 {
		t.Errorf("the good peer completed nothing")
	}
	// And the good peer still works after all that.
	if got := w.do(t, write(aSrc, 0, bGood, 0, maxFrame)); got.Status != ring.StatusOK {
		t.Fatalf("good write at the end: %v", got.Status)
	}
}

package tcp_test

import (
	"bytes"
	"testing"

	"github.com/ferrydev/ferry/plugins/tcp"
	"github.com/ferrydev/ferry/sdk/ring"
)

func FuzzDecodeHeader(f *testing.F) {
	for _, h := range []tcp.Header{
		{Op: ring.OpWrite, Seq: 1, Incarnation: 2, Region: 3, Offset: 4, Length: 5},
		{Op: ring.OpRead, Seq: ^uint64(0), Incarnation: ^uint64(0), Region: ^uint32(0), Offset: ^uint64(0), Length: ^uint64(0)},
	} {
		b := make([]byte, tcp.RequestSize)
		tcp.EncodeHeader(b, &h)
		f.Add(b, uint8(h.Op), h.Seq, h.Incarnation, h.Region, h.Offset, h.Length)
	}
	f.Add([]byte("FRYQ"), uint8(0), uint64(0), uint64(0), uint32(0), uint64(0), uint64(0))
	f.Add(bytes.Repeat([]byte{0xff}, 64), uint8(9), uint64(0), uint64(0), uint32(0), uint64(0), uint64(0))
	f.Fuzz(func(t *testing.T, b []byte, op uint8, seq, inc uint64, region uint32, off, n uint64) {
		// Arbitrary bytes: never a panic; what decodes re-encodes to the same bytes.
		var h tcp.Header
		if err := tcp.DecodeHeader(b, &h); err == nil {
			re := make([]byte, tcp.RequestSize)
			tcp.EncodeHeader(re, &h)
			if !bytes.Equal(re, b[:tcp.RequestSize]) {
				t.Fatalf("decoded %+v re-encodes to %x, input %x", h, re, b[:tcp.RequestSize])
			}
		}
		// A valid header survives encode then decode.
		x := tcp.Header{Op: ring.OpWrite, Seq: seq, Incarnation: inc, Region: region, Offset: off, Length: n}
		if op%2 == 1 {
			x.Op = ring.OpRead
		}
		enc := make([]byte, tcp.RequestSize)
		tcp.EncodeHeader(enc, &x)
		var y tcp.Header
		if err := tcp.DecodeHeader(enc, &y); err != nil || y != x {
			t.Fatalf("round trip of %+v: %+v, %v", x, y, err)
		}
		// Any single flipped bit is caught.
		enc[int(n%tcp.RequestSize)] ^= 1 << (seq % 8)
		if err := tcp.DecodeHeader(enc, &y); err == nil {
			t.Fatalf("header with a flipped bit decoded: %+v", y)
		}
	})
}

func FuzzDecodeHello(f *testing.F) {
	f.Add(tcp.AppendHello(nil, tcp.Hello{Version: 1, Incarnation: 7, Segment: "engine-b"}), uint16(1), uint64(7), "engine-b")
	f.Add(tcp.AppendHello(nil, tcp.Hello{Version: 9}), uint16(9), uint64(0), "")
	f.Add([]byte("FRYH\x01\x00\xff\xff"), uint16(0), uint64(0), "x")
	f.Fuzz(func(t *testing.T, b []byte, ver uint16, inc uint64, name string) {
		if n, err := tcp.HelloNameLen(b); err == nil && (n < 0 || n > tcp.MaxNameLen) {
			t.Fatalf("name length %d", n)
		}
		if h, err := tcp.DecodeHello(b); err == nil {
			if re := tcp.AppendHello(nil, h); !bytes.Equal(re, b) {
				t.Fatalf("decoded %+v re-encodes to %x, input %x", h, re, b)
			}
		}
		if len(name) > tcp.MaxNameLen {
			name = name[:tcp.MaxNameLen]
		}
		x := tcp.Hello{Version: ver, Incarnation: inc, Segment: name}
		enc := tcp.AppendHello([]byte("prefix"), x)[len("prefix"):]
		y, err := tcp.DecodeHello(enc)
		if err != nil || y != x {
			t.Fatalf("round trip of %+v: %+v, %v", x, y, err)
		}
		enc[int(inc%uint64(len(enc)))] ^= 1 << (ver % 8)
		if y, err := tcp.DecodeHello(enc); err == nil {
			t.Fatalf("hello with a flipped bit decoded: %+v", y)
		}
	})
}

func FuzzDecodeResponse(f *testing.F) {
	b := make([]byte, tcp.ResponseSize)
	tcp.EncodeResponse(b, &tcp.Response{Seq: 3, Status: ring.StatusPermission, Length: 0})
	f.Add(b, uint64(3), int32(4), uint64(0))
	f.Fuzz(func(t *testing.T, b []byte, seq uint64, st int32, n uint64) {
		var r tcp.Response
		if err := tcp.DecodeResponse(b, &r); err == nil {
			if !r.Status.Valid() {
				t.Fatalf("decoded invalid status %d", r.Status)
			}
			re := make([]byte, tcp.ResponseSize)
			tcp.EncodeResponse(re, &r)
			if !bytes.Equal(re, b[:tcp.ResponseSize]) {
				t.Fatalf("decoded %+v re-encodes differently", r)
			}
		}
		x := tcp.Response{Seq: seq, Status: ring.Status(st), Length: n}
		enc := make([]byte, tcp.ResponseSize)
		tcp.EncodeResponse(enc, &x)
		var y tcp.Response
		err := tcp.DecodeResponse(enc, &y)
		if x.Status.Valid() != (err == nil) || (err == nil && y != x) {
			t.Fatalf("round trip of %+v: %+v, %v", x, y, err)
		}
	})
}

func FuzzDecodeHelloReply(f *testing.F) {
	b := make([]byte, tcp.HelloReplySize)
	tcp.EncodeHelloReply(b, tcp.HelloReply{Version: 1, Status: ring.StatusOK, Incarnation: 5, MaxFrame: 1 << 26})
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := tcp.DecodeHelloReply(b); err == nil {
			re := make([]byte, tcp.HelloReplySize)
			tcp.EncodeHelloReply(re, r)
			if !bytes.Equal(re, b[:tcp.HelloReplySize]) {
				t.Fatalf("decoded %+v re-encodes differently", r)
			}
		}
	})
}

func TestWireSizes(t *testing.T) {
	// The sizes are part of protocol version 1.
	if tcp.RequestSize != 48 || tcp.ResponseSize != 32 || tcp.HelloSize != 24 || tcp.HelloReplySize != 32 {
		t.Fatal("wire sizes changed: bump ProtocolVersion")
	}
	b := make([]byte, tcp.RequestSize)
	tcp.EncodeHeader(b, &tcp.Header{Op: ring.OpRead, Seq: 0x0102030405060708, Incarnation: 9, Region: 10, Offset: 11, Length: 12})
	want := []byte{'F', 'R', 'Y', 'Q', 1, 2, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1, 9, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 0}
	if !bytes.Equal(b[:28], want) {
		t.Fatalf("header layout: %x", b[:28])
	}
}

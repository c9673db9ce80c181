package tcp_test

import (
	"bytes"
	"strconv"
	"strings"
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
	nonce := bytes.Repeat([]byte{0x5a}, tcp.NonceSize)
	f.Add(tcp.AppendHello(nil, tcp.Hello{Version: 1, Incarnation: 7, Segment: "engine-b"}), uint16(1), uint32(0), uint64(7), "engine-b", nonce)
	f.Add(tcp.AppendHello(nil, tcp.Hello{Version: 1, Flags: tcp.FlagAuth, Incarnation: 7, Segment: "engine-b", Nonce: [tcp.NonceSize]byte(nonce)}),
		uint16(1), uint32(tcp.FlagAuth), uint64(7), "engine-b", nonce)
	f.Add(tcp.AppendHello(nil, tcp.Hello{Version: 9}), uint16(9), uint32(0), uint64(0), "", []byte{})
	f.Add([]byte("FRYH\x01\x00\xff\xff"), uint16(0), uint32(2), uint64(0), "x", []byte{1})
	f.Add(tcp.AppendHello(nil, tcp.Hello{Version: 1, Flags: tcp.FlagAuth | tcp.FlagFrom, Incarnation: 7, Segment: "engine-b", From: "engine-a", Nonce: [tcp.NonceSize]byte(nonce)}),
		uint16(1), uint32(tcp.FlagAuth|tcp.FlagFrom), uint64(7), "engine-b", nonce)
	f.Add(tcp.AppendHello(nil, tcp.Hello{Version: 1, Flags: tcp.FlagFrom, Incarnation: 7, Segment: "engine-b", From: "engine-a"}),
		uint16(1), uint32(tcp.FlagFrom), uint64(7), "a\x00b", nonce)
	f.Add(tcp.AppendHello(nil, tcp.Hello{Version: 1, Flags: tcp.FlagFrom | tcp.FlagRun | tcp.FlagFence, Incarnation: 7, Segment: "engine-b", From: "engine-a", Run: 9, Epoch: 3}),
		uint16(1), uint32(tcp.FlagFrom|tcp.FlagRun|tcp.FlagFence), uint64(7), "engine-b", nonce)
	const known = tcp.FlagAuth | tcp.FlagFrom | tcp.FlagRun | tcp.FlagFence
	f.Fuzz(func(t *testing.T, b []byte, ver uint16, flags uint32, inc uint64, name string, nonce []byte) {
		if n, err := tcp.HelloRestLen(b); err == nil && (n < 0 || n > tcp.MaxNameLen+tcp.NonceSize+16) {
			t.Fatalf("rest length %d", n)
		}
		if h, err := tcp.DecodeHello(b); err == nil {
			if h.Flags&^known != 0 || h.Flags&tcp.FlagAuth == 0 && h.Nonce != [tcp.NonceSize]byte{} ||
				h.Flags&tcp.FlagRun == 0 && (h.Run != 0 || h.Epoch != 0) ||
				h.Flags&tcp.FlagFence != 0 && h.Flags&(tcp.FlagRun|tcp.FlagFrom) != tcp.FlagRun|tcp.FlagFrom ||
				h.Flags&tcp.FlagFrom == 0 && h.From != "" ||
				h.Flags&tcp.FlagFrom != 0 && (h.From == "" || strings.Contains(h.Segment, "\x00")) {
				t.Fatalf("decoded %+v", h)
			}
			if re := tcp.AppendHello(nil, h); !bytes.Equal(re, b) {
				t.Fatalf("decoded %+v re-encodes to %x, input %x", h, re, b)
			}
		}
		if len(name) > tcp.MaxNameLen {
			name = name[:tcp.MaxNameLen]
		}
		x := tcp.Hello{Version: ver, Flags: flags & known, Incarnation: inc, Segment: name}
		if x.Flags&tcp.FlagAuth != 0 {
			copy(x.Nonce[:], nonce)
		}
		if x.Flags&tcp.FlagRun != 0 {
			x.Run, x.Epoch = inc^0x5555, inc+1
		}
		if x.Flags&tcp.FlagFence != 0 && x.Flags&(tcp.FlagRun|tcp.FlagFrom) != tcp.FlagRun|tcp.FlagFrom {
			// A fence names a run and its engine: refused without them.
			if y, err := tcp.DecodeHello(tcp.AppendHello(nil, x)); err == nil {
				t.Fatalf("a fence hello without run or sender decoded: %+v", y)
			}
			return
		}
		if x.Flags&tcp.FlagFrom != 0 {
			// The dialer's name follows the target's after a NUL, which
			// the target's therefore cannot hold.
			x.From = "dialer-" + strconv.FormatUint(inc, 36)
			x.Segment = strings.ReplaceAll(name, "\x00", ".")
			if n := tcp.MaxNameLen - 1 - len(x.From); len(x.Segment) > n {
				x.Segment = x.Segment[:n]
			}
		}
		enc := tcp.AppendHello([]byte("prefix"), x)[len("prefix"):]
		y, err := tcp.DecodeHello(enc)
		if err != nil || y != x {
			t.Fatalf("round trip of %+v: %+v, %v", x, y, err)
		}
		enc[int(inc%uint64(len(enc)))] ^= 1 << (ver % 8)
		if y, err := tcp.DecodeHello(enc); err == nil {
			t.Fatalf("hello with a flipped bit decoded: %+v", y)
		}
		// Flags this version does not know are refused, not skipped.
		if flags&^known != 0 {
			x.Flags = flags
			if y, err := tcp.DecodeHello(tcp.AppendHello(nil, x)); err == nil {
				t.Fatalf("hello with flags %#x decoded: %+v", flags, y)
			}
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
	f.Add(b, uint16(0), int32(0), uint64(5))
	tcp.EncodeHelloReply(b, tcp.HelloReply{Version: 1, Flags: tcp.FlagAuth, Status: ring.StatusPermission, Incarnation: 5, MaxFrame: 1 << 26})
	f.Add(b, uint16(tcp.FlagAuth), int32(ring.StatusPermission), uint64(5))
	f.Fuzz(func(t *testing.T, b []byte, flags uint16, st int32, inc uint64) {
		if r, err := tcp.DecodeHelloReply(b); err == nil {
			if !r.Status.Valid() || r.Flags&^tcp.FlagAuth != 0 {
				t.Fatalf("decoded %+v", r)
			}
			re := make([]byte, tcp.HelloReplySize)
			tcp.EncodeHelloReply(re, r)
			if !bytes.Equal(re, b[:tcp.HelloReplySize]) {
				t.Fatalf("decoded %+v re-encodes differently", r)
			}
		}
		x := tcp.HelloReply{Version: 1, Flags: flags, Status: ring.Status(st), Incarnation: inc, MaxFrame: inc >> 3}
		enc := make([]byte, tcp.HelloReplySize)
		tcp.EncodeHelloReply(enc, x)
		y, err := tcp.DecodeHelloReply(enc)
		valid := x.Status.Valid() && flags&^tcp.FlagAuth == 0
		if valid != (err == nil) || (err == nil && y != x) {
			t.Fatalf("round trip of %+v: %+v, %v", x, y, err)
		}
	})
}

func FuzzDecodeProof(f *testing.F) {
	b := make([]byte, tcp.ProofSize)
	p := tcp.Proof{}
	for i := range p.MAC {
		p.Nonce[i], p.MAC[i] = byte(i), byte(255-i)
	}
	tcp.EncodeProof(b, &p)
	f.Add(b, int32(0), p.Nonce[:], p.MAC[:], uint8(3))
	tcp.EncodeProof(b, &tcp.Proof{Status: ring.StatusPermission})
	f.Add(b, int32(ring.StatusPermission), []byte{}, []byte{}, uint8(200))
	f.Add([]byte("FRYP"), int32(-1), []byte{1}, []byte{2}, uint8(0))
	f.Fuzz(func(t *testing.T, b []byte, st int32, nonce, mac []byte, flip uint8) {
		var p tcp.Proof
		if err := tcp.DecodeProof(b, &p); err == nil {
			if !p.Status.Valid() {
				t.Fatalf("decoded invalid status %d", p.Status)
			}
			re := make([]byte, tcp.ProofSize)
			tcp.EncodeProof(re, &p)
			if !bytes.Equal(re, b[:tcp.ProofSize]) {
				t.Fatalf("decoded %+v re-encodes differently", p)
			}
		}
		x := tcp.Proof{Status: ring.Status(st)}
		copy(x.Nonce[:], nonce)
		copy(x.MAC[:], mac)
		enc := make([]byte, tcp.ProofSize)
		tcp.EncodeProof(enc, &x)
		var y tcp.Proof
		err := tcp.DecodeProof(enc, &y)
		if x.Status.Valid() != (err == nil) || (err == nil && y != x) {
			t.Fatalf("round trip of %+v: %+v, %v", x, y, err)
		}
		enc[int(flip)%tcp.ProofSize] ^= 1 << (flip % 8)
		if err := tcp.DecodeProof(enc, &y); err == nil {
			t.Fatalf("proof with a flipped bit decoded: %+v", y)
		}
	})
}

func TestWireSizes(t *testing.T) {
	// The sizes are part of protocol version 1.
	if tcp.RequestSize != 48 || tcp.ResponseSize != 32 || tcp.HelloSize != 24 || tcp.HelloReplySize != 32 ||
		tcp.ProofSize != 76 || tcp.NonceSize != 32 || tcp.MACSize != 32 {
		t.Fatal("wire sizes changed: bump ProtocolVersion")
	}
	b := make([]byte, tcp.RequestSize)
	tcp.EncodeHeader(b, &tcp.Header{Op: ring.OpRead, Seq: 0x0102030405060708, Incarnation: 9, Region: 10, Offset: 11, Length: 12})
	want := []byte{'F', 'R', 'Y', 'Q', 1, 2, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1, 9, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 0}
	if !bytes.Equal(b[:28], want) {
		t.Fatalf("header layout: %x", b[:28])
	}
}

package validate

import (
	"testing"

	"github.com/ferrydev/ferry/host/segment"
)

var bufs = []segment.Buffer{
	{Base: 0x1000, Length: 0x1000, Region: 1, Perm: segment.PermRemoteReadWrite},
	{Base: 0x4000, Length: 0x100, Region: 2, Perm: segment.PermRemoteRead},
	{Base: 0x8000, Length: 0x100, Region: 3, Perm: segment.PermLocal},
}

func good() Input {
	return Input{Op: Write, Length: 16, Open: true, LocalFound: true, LocalRegion: 7, LocalOffset: 32, Buffers: bufs, Remote: 0x1010}
}

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		name   string
		edit   func(*Input)
		fault  Fault
		buffer int
	}{
		{"good write", func(*Input) {}, OK, -1},
		{"good read of a read-only buffer", func(in *Input) { in.Op, in.Remote = Read, 0x4000 }, OK, -1},
		{"whole buffer", func(in *Input) { in.Remote, in.Length = 0x1000, 0x1000 }, OK, -1},
		{"op 0", func(in *Input) { in.Op = 0 }, UnknownOp, -1},
		{"op 3", func(in *Input) { in.Op = 3 }, UnknownOp, -1},
		{"zero length", func(in *Input) { in.Length = 0 }, ZeroLength, -1},
		{"segment not open", func(in *Input) { in.Open = false }, NotOpen, -1},
		{"retired", func(in *Input) { in.Retired = "the peer restarted" }, Retired, -1},
		{"local not registered", func(in *Input) { in.LocalFound = false }, NotRegistered, -1},
		{"no buffer at the address", func(in *Input) { in.Remote = 0x3000 }, NoBuffer, -1},
		{"below every buffer", func(in *Input) { in.Remote = 0x10 }, NoBuffer, -1},
		{"one byte past the end", func(in *Input) { in.Remote, in.Length = 0x1000, 0x1001 }, OutOfBounds, -1},
		{"address wraps", func(in *Input) { in.Remote, in.Length = 0x1010, ^uint64(0) }, OutOfBounds, -1},
		{"write to read-only", func(in *Input) { in.Remote = 0x4000 }, Permission, 1},
		{"read of a local-only buffer", func(in *Input) { in.Op, in.Remote = Read, 0x8000 }, Permission, 2},
		// The order is fixed: the first fault wins.
		{"unknown op and zero length", func(in *Input) { in.Op, in.Length = 9, 0 }, UnknownOp, -1},
		{"not open and not registered", func(in *Input) { in.Open, in.LocalFound = false, false }, NotOpen, -1},
		{"not registered and out of bounds", func(in *Input) { in.LocalFound, in.Remote = false, 0x3000 }, NotRegistered, -1},
	} {
		in := good()
		c.edit(&in)
		r := Check(&in)
		if r.Fault != c.fault || r.Buffer != c.buffer {
			t.Errorf("%s: Check = fault %v buffer %d, want %v buffer %d", c.name, r.Fault, r.Buffer, c.fault, c.buffer)
		}
	}
	in := good()
	r := Check(&in)
	if r.LocalRegion != 7 || r.LocalOffset != 32 || r.RemoteRegion != 1 || r.RemoteOffset != 0x10 {
		t.Errorf("good write translated to %+v, want local 7+32, remote 1+0x10", r)
	}
}

func TestCheckAllocatesNothing(t *testing.T) {
	in := good()
	if n := testing.AllocsPerRun(100, func() { _ = Check(&in) }); n != 0 {
		t.Errorf("Check allocates %v times per call", n)
	}
}

func TestFaultNames(t *testing.T) {
	if OK.String() != "ok" || Permission.String() != "permission denied" || Fault(99).String() != "fault(99)" {
		t.Errorf("fault names: %v %v %v", OK, Permission, Fault(99))
	}
}

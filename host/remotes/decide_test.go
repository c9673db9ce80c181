package remotes

import (
	"testing"

	"github.com/ferrydev/ferry/host/segment"
)

func desc(inc uint64, bases ...uint64) *segment.Descriptor {
	d := &segment.Descriptor{Schema: 1, Name: "b", Incarnation: inc, MachineID: "m", Transports: map[string][]byte{"tcp": []byte("ep")}}
	for i, b := range bases {
		d.Buffers = append(d.Buffers, segment.Buffer{Region: uint32(i + 1), Base: b, Length: 4096, Perm: segment.PermRemoteReadWrite, Location: "cpu"})
	}
	return d
}

func seqd(d *segment.Descriptor, seq uint64) *segment.Descriptor {
	d.Seq = seq
	return d
}

func TestDecide(t *testing.T) {
	moved := desc(7, 0x1000)
	moved.Transports["tcp"] = []byte("ep2")
	cases := []struct {
		name   string
		cached *segment.Descriptor
		gone   bool
		c      Change
		want   Action
	}{
		{"same descriptor again", desc(7, 0x1000), false, Change{Desc: desc(7, 0x1000)}, Keep},
		{"a buffer registered", desc(7, 0x1000), false, Change{Desc: desc(7, 0x1000, 0x9000)}, Refresh},
		{"a buffer unregistered", desc(7, 0x1000, 0x9000), false, Change{Desc: desc(7, 0x9000)}, Refresh},
		{"an endpoint changed", desc(7, 0x1000), false, Change{Desc: moved}, Refresh},
		{"new incarnation", desc(7, 0x1000), false, Change{Desc: desc(8, 0x1000)}, Retire},
		{"new incarnation after gone", desc(7, 0x1000), true, Change{Desc: desc(8)}, Retire},
		{"deleted", desc(7, 0x1000), false, Change{Deleted: true}, Gone},
		{"deleted again", desc(7, 0x1000), true, Change{Deleted: true}, Keep},
		{"back, same life, same descriptor", desc(7, 0x1000), true, Change{Desc: desc(7, 0x1000)}, Refresh},
		{"not a descriptor", desc(7, 0x1000), false, Change{}, Keep},
		{"not a descriptor while gone", desc(7, 0x1000), true, Change{}, Keep},
		{"an older publication replayed", seqd(desc(7, 0x1000, 0x9000), 20), false, Change{Desc: seqd(desc(7, 0x1000), 10), Ordered: true}, Keep},
		{"the previous life replayed", seqd(desc(8, 0x1000), 20), false, Change{Desc: seqd(desc(7, 0x1000), 10), Ordered: true}, Keep},
		{"the previous life replayed while gone", seqd(desc(8, 0x1000), 20), true, Change{Desc: seqd(desc(7, 0x1000), 10), Ordered: true}, Keep},
		{"a newer publication", seqd(desc(7, 0x1000), 10), false, Change{Desc: seqd(desc(7, 0x1000, 0x9000), 20), Ordered: true}, Refresh},
		{"the next life", seqd(desc(7, 0x1000), 10), false, Change{Desc: seqd(desc(8), 20), Ordered: true}, Retire},
		{"older, but not ordered (no secret)", seqd(desc(8, 0x1000), 20), false, Change{Desc: seqd(desc(7, 0x1000), 10)}, Retire},
	}
	for _, c := range cases {
		if got := Decide(c.cached, c.gone, c.c); got != c.want {
			t.Errorf("%s: Decide = %v, want %v", c.name, got, c.want)
		}
	}
}

package ring

import (
	"bytes"
	"testing"
)

func TestDescriptorRoundTrip(t *testing.T) {
	d := Descriptor{Token: 1<<63 | 5, Op: OpRead, Prio: 2, Rail: 7, Status: StatusPermission, LocalRegion: 9, Peer: 11,
		LocalOffset: 1 << 40, RemoteRegion: 13, Flags: 3, RemoteOffset: 17, Length: 4096, Deadline: -1}
	var b [SlotSize]byte
	d.Encode(b[:])
	var got Descriptor
	got.Decode(b[:])
	if got != d {
		t.Fatalf("decode(encode(d)) = %+v, want %+v", got, d)
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		d    Descriptor
		ok   bool
	}{
		{"write", Descriptor{Op: OpWrite, Length: 1}, true},
		{"nop", Descriptor{Op: OpNop}, true},
		{"zero length", Descriptor{Op: OpRead}, false},
		{"unknown op", Descriptor{Op: 99, Length: 1}, false},
		{"completion on a submission ring", Descriptor{Op: OpCompletion, Length: 1}, false},
		{"local overflow", Descriptor{Op: OpWrite, LocalOffset: ^uint64(0), Length: 2}, false},
		{"remote overflow", Descriptor{Op: OpRead, RemoteOffset: ^uint64(0) - 1, Length: 3}, false},
		{"bad status", Descriptor{Op: OpWrite, Length: 1, Status: 1000}, false},
	}
	for _, c := range cases {
		if err := c.d.Validate(); (err == nil) != c.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", c.name, err, c.ok)
		}
	}
}

// FuzzDescriptor decodes arbitrary slot bytes, as a plugin does with what
// the host wrote: decoding never panics, a descriptor that validates has
// ranges that do not overflow, and re-encoding gives the same bytes.
func FuzzDescriptor(f *testing.F) {
	var seed [SlotSize]byte
	(&Descriptor{Token: 1, Op: OpWrite, Length: 10}).Encode(seed[:])
	f.Add(seed[:])
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < SlotSize {
			return
		}
		var d Descriptor
		d.Decode(b)
		if d.Validate() == nil && d.Op != OpNop {
			if d.Length == 0 || d.LocalOffset+d.Length < d.LocalOffset || d.RemoteOffset+d.Length < d.RemoteOffset {
				t.Fatalf("Validate accepted %+v", d)
			}
		}
		var out [SlotSize]byte
		d.Encode(out[:])
		if !bytes.Equal(out[:], b[:SlotSize]) {
			t.Fatalf("encode(decode(b)) differs from b")
		}
	})
}

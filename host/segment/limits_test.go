package segment

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/sdk"
)

// Every field of a descriptor that its writer chooses the size of is
// capped: at the cap it is read, one over it is refused with an error
// that names the field and its size and does not repeat its content.
func TestDecodeCapsFields(t *testing.T) {
	long := func(n int) string { return strings.Repeat("x", n) }
	eps := func(n int) map[string][]byte {
		m := map[string][]byte{}
		for i := range n {
			m[fmt.Sprint("t", i)] = []byte("e")
		}
		return m
	}
	rails := func(n int, name, label string) map[string][]RailInfo {
		r := make([]RailInfo, n)
		for i := range r {
			r[i] = RailInfo{Name: name, Label: label}
		}
		return map[string][]RailInfo{"tcp": r}
	}
	cases := []struct {
		field    string
		at, over func(d *Descriptor)
		saying   string
	}{
		{"name", func(d *Descriptor) { d.Name = long(MaxString) }, func(d *Descriptor) { d.Name = long(MaxString + 1) }, "its name is 257 bytes"},
		{"machine id", func(d *Descriptor) { d.MachineID = long(MaxString) }, func(d *Descriptor) { d.MachineID = long(MaxString + 1) }, "its machine id is 257 bytes"},
		{"control", func(d *Descriptor) { d.Control = long(MaxString) }, func(d *Descriptor) { d.Control = long(MaxString + 1) }, "its control address is 257 bytes"},
		{"location", func(d *Descriptor) { d.Buffers[0].Location = sdk.MemoryKind(long(MaxString)) }, func(d *Descriptor) { d.Buffers[0].Location = sdk.MemoryKind(long(MaxString + 1)) }, "buffer 0 location is 257 bytes"},
		{"transports", func(d *Descriptor) { d.Transports = eps(MaxTransports) }, func(d *Descriptor) { d.Transports = eps(MaxTransports + 1) }, "lists 65 transports"},
		{"transport name", func(d *Descriptor) { d.Transports = map[string][]byte{long(MaxString): nil} }, func(d *Descriptor) { d.Transports = map[string][]byte{long(MaxString + 1): nil} }, "transport name is 257 bytes"},
		{"endpoint", func(d *Descriptor) { d.Transports["tcp"] = make([]byte, MaxEndpoint) }, func(d *Descriptor) { d.Transports["tcp"] = make([]byte, MaxEndpoint+1) }, `transport "tcp"'s endpoint is 65537 bytes`},
		{"rails", func(d *Descriptor) { d.Rails = rails(MaxRails, "r", "") }, func(d *Descriptor) { d.Rails = rails(MaxRails+1, "r", "") }, `lists 257 rails of transport "tcp"`},
		{"rail name", func(d *Descriptor) { d.Rails = rails(1, long(MaxString), "") }, func(d *Descriptor) { d.Rails = rails(1, long(MaxString+1), "") }, `rail 0 name is 257 bytes`},
		{"rail label", func(d *Descriptor) { d.Rails = rails(1, "r", long(MaxString)) }, func(d *Descriptor) { d.Rails = rails(1, "r", long(MaxString+1)) }, `rail 0 label is 257 bytes`},
		{"numa nodes", func(d *Descriptor) { d.Topology = &Topology{NUMANodes: make([]NUMANode, MaxTopology)} }, func(d *Descriptor) { d.Topology = &Topology{NUMANodes: make([]NUMANode, MaxTopology+1)} }, "lists 1025 NUMA nodes"},
		{"cpu list", func(d *Descriptor) { d.Topology = &Topology{NUMANodes: []NUMANode{{CPUs: long(MaxCPUList)}}} }, func(d *Descriptor) { d.Topology = &Topology{NUMANodes: []NUMANode{{CPUs: long(MaxCPUList + 1)}}} }, "CPU list is 4097 bytes"},
		{"nics", func(d *Descriptor) { d.Topology = &Topology{NICs: make([]NIC, MaxTopology)} }, func(d *Descriptor) { d.Topology = &Topology{NICs: make([]NIC, MaxTopology+1)} }, "lists 1025 NICs"},
		{"nic name", func(d *Descriptor) { d.Topology = &Topology{NICs: []NIC{{Name: long(MaxString)}}} }, func(d *Descriptor) { d.Topology = &Topology{NICs: []NIC{{Name: long(MaxString + 1)}}} }, "NIC 0 name is 257 bytes"},
		{"nic addrs", func(d *Descriptor) { d.Topology = &Topology{NICs: []NIC{{Addrs: make([]string, MaxTopology)}}} }, func(d *Descriptor) { d.Topology = &Topology{NICs: []NIC{{Addrs: make([]string, MaxTopology+1)}}} }, "lists 1025 addresses of NIC 0"},
		{"nic addr", func(d *Descriptor) { d.Topology = &Topology{NICs: []NIC{{Addrs: []string{long(MaxString)}}}} }, func(d *Descriptor) { d.Topology = &Topology{NICs: []NIC{{Addrs: []string{long(MaxString + 1)}}}} }, "NIC 0 address 0 is 257 bytes"},
	}
	enc := func(t *testing.T, f func(d *Descriptor)) []byte {
		d := signTestDesc()
		f(d)
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, c := range cases {
		t.Run(c.field, func(t *testing.T) {
			if _, err := Decode("ferry/segments/a", enc(t, c.at)); err != nil {
				t.Fatalf("at the cap: %v", err)
			}
			_, err := Decode("ferry/segments/a", enc(t, c.over))
			if err == nil {
				t.Fatal("one over the cap is accepted")
			}
			msg := err.Error()
			if !strings.Contains(msg, c.saying) || !strings.Contains(msg, "over the cap") || !strings.Contains(msg, `"ferry/segments/a"`) {
				t.Fatalf("error %q does not say %q, over the cap, and where", msg, c.saying)
			}
			if len(msg) > 512 {
				t.Fatalf("the error is %d bytes: it repeats what the descriptor holds", len(msg))
			}
		})
	}
}

package topology

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/ferrydev/ferry/host/segment"
)

func write(t *testing.T, root, path, content string) {
	t.Helper()
	p := filepath.Join(root, path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A two-socket machine with a NIC on each node, a virtual NIC and a NIC
// whose speed the driver does not know.
func TestDiscover(t *testing.T) {
	root := t.TempDir()
	write(t, root, "devices/system/node/node1/cpulist", "32-63\n")
	write(t, root, "devices/system/node/node0/cpulist", "0-31\n")
	write(t, root, "devices/system/node/online", "0-1\n")
	write(t, root, "class/net/lo/speed", "")
	write(t, root, "class/net/ens1/device/numa_node", "0\n")
	write(t, root, "class/net/ens1/speed", "100000\n")
	write(t, root, "class/net/ens2/device/numa_node", "1\n")
	write(t, root, "class/net/ens2/speed", "-1\n")
	write(t, root, "class/net/veth0/speed", "10000\n")
	got := Discover(root, func(name string) []string {
		if name == "ens1" {
			return []string{"10.0.0.1/24"}
		}
		return nil
	})
	want := &segment.Topology{
		NUMANodes: []segment.NUMANode{{ID: 0, CPUs: "0-31"}, {ID: 1, CPUs: "32-63"}},
		NICs: []segment.NIC{
			{Name: "ens1", NUMANode: 0, SpeedMbps: 100000, Addrs: []string{"10.0.0.1/24"}},
			{Name: "ens2", NUMANode: 1, SpeedMbps: -1},
			{Name: "veth0", NUMANode: -1, SpeedMbps: 10000, Virtual: true},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Discover =\n%+v\nwant\n%+v", got, want)
	}
}

func TestDiscoverNothing(t *testing.T) {
	got := Discover(filepath.Join(t.TempDir(), "missing"), nil)
	if len(got.NUMANodes) != 0 || len(got.NICs) != 0 {
		t.Errorf("Discover of an empty root = %+v, want nothing", got)
	}
}

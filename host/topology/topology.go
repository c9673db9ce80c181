package topology

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/ferrydev/ferry/host/segment"
)

// Root is where sysfs is mounted.
const Root = "/sys"

// Discover reads the topology under root (Root on a real machine). addrs,
// when not nil, returns the addresses of an interface by name; sysfs does
// not list them.
func Discover(root string, addrs func(ifname string) []string) *segment.Topology {
	t := &segment.Topology{}
	nodes, _ := filepath.Glob(filepath.Join(root, "devices/system/node/node[0-9]*"))
	for _, n := range nodes {
		id, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(n), "node"))
		if err != nil {
			continue
		}
		t.NUMANodes = append(t.NUMANodes, segment.NUMANode{ID: id, CPUs: readString(filepath.Join(n, "cpulist"))})
	}
	slices.SortFunc(t.NUMANodes, func(a, b segment.NUMANode) int { return a.ID - b.ID })
	nics, _ := os.ReadDir(filepath.Join(root, "class/net"))
	for _, d := range nics {
		name := d.Name()
		if name == "lo" {
			continue
		}
		dir := filepath.Join(root, "class/net", name)
		nic := segment.NIC{Name: name, NUMANode: -1, SpeedMbps: -1}
		if _, err := os.Stat(filepath.Join(dir, "device")); err != nil {
			nic.Virtual = true
		}
		if v, ok := readInt(filepath.Join(dir, "device/numa_node")); ok && v >= 0 {
			nic.NUMANode = v
		}
		if v, ok := readInt(filepath.Join(dir, "speed")); ok && v > 0 {
			nic.SpeedMbps = v
		}
		if addrs != nil {
			nic.Addrs = addrs(name)
		}
		t.NICs = append(t.NICs, nic)
	}
	return t
}

func readString(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func readInt(path string) (int, bool) {
	v, err := strconv.Atoi(readString(path))
	return v, err == nil
}

package tcp

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/sdk"
)

func TestPairRail(t *testing.T) {
	ip := netip.MustParseAddr
	cases := []struct {
		name  string
		local netip.Addr
		rail  int
		peer  []string
		want  int
	}{
		{"one address", ip("10.0.0.1"), 3, []string{"10.9.9.9:1"}, 0},
		{"exact match", ip("127.0.0.1"), 0, []string{"127.0.0.1:1", "127.0.0.2:2"}, 0},
		{"exact match, second", ip("127.0.0.2"), 1, []string{"127.0.0.1:1", "127.0.0.2:2"}, 1},
		{"prefix beats index", ip("127.0.0.2"), 0, []string{"127.0.0.1:1", "127.0.0.2:2"}, 1},
		{"same subnet", ip("10.0.1.5"), 0, []string{"10.0.0.9:1", "10.0.1.9:1", "192.168.1.1:1"}, 1},
		{"family before prefix", ip("10.0.0.1"), 0, []string{"[fd00::1]:1", "192.168.0.1:1"}, 1},
		{"v4-mapped is v4", ip("10.0.0.1"), 0, []string{"[fd00::1]:1", "[::ffff:10.0.0.2]:1"}, 1},
		{"tie, rail 0", ip("10.0.0.1"), 0, []string{"10.0.0.2:1", "10.0.0.3:1"}, 0},
		{"tie, rail 1", ip("10.0.0.1"), 1, []string{"10.0.0.2:1", "10.0.0.3:1"}, 1},
		{"tie, rail 2 wraps", ip("10.0.0.1"), 2, []string{"10.0.0.2:1", "10.0.0.3:1"}, 0},
		{"tie, rail 3 wraps", ip("10.0.0.1"), 3, []string{"10.0.0.2:1", "10.0.0.3:1"}, 1},
		{"tie, next tied from rail", ip("10.0.0.1"), 1, []string{"10.0.0.2:1", "192.168.0.1:1", "10.0.0.3:1"}, 2},
		{"tie, wraps to first tied", ip("10.0.0.1"), 2, []string{"10.0.0.3:1", "192.168.0.1:1", "192.168.0.2:1"}, 0},
		{"wildcard v4 spreads", ip("0.0.0.0"), 4, []string{"10.0.0.1:1", "10.0.0.2:1", "[fd00::1]:1"}, 1},
		{"wildcard v6 spreads", ip("::"), 2, []string{"10.0.0.1:1", "10.0.0.2:1", "[fd00::1]:1"}, 2},
		{"invalid local spreads", netip.Addr{}, 1, []string{"10.0.0.1:1", "10.0.0.2:1"}, 1},
		{"v6 prefix", ip("fd00::1:5"), 0, []string{"[fd00::2:1]:1", "[fd00::1:9]:1", "10.0.0.1:1"}, 1},
		{"v6 zone", ip("fe80::1%eth0"), 0, []string{"[fd00::1]:1", "[fe80::2%eth0]:1"}, 1},
		{"name matches nothing", ip("10.0.0.1"), 0, []string{"node-a:1", "192.168.0.1:1"}, 1},
		{"names only: by index", ip("10.0.0.1"), 1, []string{"node-a:1", "node-b:1"}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := pairRail(c.local, c.rail, c.peer); got != c.want {
				t.Errorf("pairRail(%v, %d, %q) = %d, want %d", c.local, c.rail, c.peer, got, c.want)
			}
		})
	}
}

func TestDialSource(t *testing.T) {
	ip := netip.MustParseAddr
	cases := []struct {
		local  netip.Addr
		target string
		want   string // "" for no binding
	}{
		{ip("0.0.0.0"), "10.0.0.1:5", ""},
		{ip("::"), "[fd00::1]:5", ""},
		{netip.Addr{}, "10.0.0.1:5", ""},
		{ip("127.0.0.2"), "127.0.0.1:5", "127.0.0.2:0"},
		{ip("127.0.0.2"), "10.0.0.1:5", ""},
		{ip("127.0.0.1"), "localhost:5", ""},
		{ip("10.0.0.1"), "127.0.0.1:5", ""},
		{ip("10.0.0.1"), "[fd00::1]:5", ""},
		{ip("10.0.0.1"), "10.0.0.2:5", "10.0.0.1:0"},
		{ip("10.0.0.1"), "[::ffff:10.0.0.2]:5", "10.0.0.1:0"},
		{ip("10.0.0.1"), "node-b:5", "10.0.0.1:0"},
		{ip("fd00::1"), "[fd00::2]:5", "[fd00::1]:0"},
		{ip("::1"), "[::1]:5", "[::1]:0"},
	}
	for _, c := range cases {
		got := dialSource(c.local, c.target)
		s := ""
		if got != nil {
			s = got.String()
		}
		if s != c.want {
			t.Errorf("dialSource(%v, %q) = %q, want %q", c.local, c.target, s, c.want)
		}
	}
}

// withSysfs points sysfsRoot at a fixture tree: files maps paths under
// class/net to their contents.
func withSysfs(t *testing.T, files map[string]string) {
	t.Helper()
	root := t.TempDir()
	for p, body := range files {
		full := filepath.Join(root, "class", "net", p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := sysfsRoot
	sysfsRoot = root
	t.Cleanup(func() { sysfsRoot = old })
}

func TestInterfaceFacts(t *testing.T) {
	withSysfs(t, map[string]string{
		"fast/device/numa_node":   "1\n",
		"fast/speed":              "100000\n",
		"slow/device/numa_node":   "0\n",
		"slow/speed":              "2500\n",
		"nonuma/device/numa_node": "-1\n",
		"nonuma/speed":            "-1\n",
		"junk/device/numa_node":   "zero\n",
		"junk/speed":              "fast\n",
		"nodevice/speed":          "10000\n",
	})
	if err := os.Mkdir(filepath.Join(sysfsRoot, "class", "net", "unreadable"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A directory where the file should be: reading it fails.
	if err := os.MkdirAll(filepath.Join(sysfsRoot, "class", "net", "unreadable", "speed"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		numa int
		gbps float64
	}{
		{"fast", 1, 100},
		{"slow", 0, 2.5},
		{"nonuma", -1, 0},
		{"junk", -1, 0},
		{"nodevice", -1, 10},
		{"unreadable", -1, 0},
		{"missing", -1, 0},
	}
	for _, c := range cases {
		numa, gbps := interfaceFacts(c.name)
		if numa != c.numa || gbps != c.gbps {
			t.Errorf("%s: NUMA node %d, %g Gb/s; want %d, %g", c.name, numa, gbps, c.numa, c.gbps)
		}
	}
}

// TestProbeRails starts a transport on a loopback address and, where the
// machine has one, on an address of a non-loopback interface, with sysfs
// facts for both interfaces: only the non-loopback rail reports them.
func TestProbeRails(t *testing.T) {
	listen := `"127.0.0.1:0"`
	var ifName string
	if ifs, err := net.Interfaces(); err == nil {
	find:
		for _, ifc := range ifs {
			if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
				continue
			}
			addrs, _ := ifc.Addrs()
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLinkLocalUnicast() {
					ifName = ifc.Name
					listen += `, "` + net.JoinHostPort(n.IP.String(), "0") + `"`
					break find
				}
			}
		}
	}
	lo := "lo"
	if ifs, err := net.Interfaces(); err == nil {
		for _, ifc := range ifs {
			if ifc.Flags&net.FlagLoopback != 0 {
				lo = ifc.Name
			}
		}
	}
	files := map[string]string{lo + "/device/numa_node": "0\n", lo + "/speed": "1000\n"}
	if ifName != "" {
		files[ifName+"/device/numa_node"] = "3\n"
		files[ifName+"/speed"] = "25000\n"
	}
	withSysfs(t, files)

	tr := New(WithLogger(hclog.NewNullLogger()))
	if _, err := tr.Start(context.Background(), sdk.StartConfig{Engine: "e", Config: []byte("listen = [" + listen + "]")}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := tr.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	pr, err := tr.Probe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := 1
	if ifName != "" {
		want = 2
	}
	if len(pr.Rails) != want {
		t.Fatalf("%d rails, want %d: %+v", len(pr.Rails), want, pr.Rails)
	}
	if r := pr.Rails[0]; r.NUMANode != -1 || r.BandwidthGbps != 0 {
		t.Errorf("loopback rail %+v: want NUMA node -1, 0 Gb/s", r)
	}
	if ifName == "" {
		t.Log("no non-loopback IPv4 interface: only the loopback rule was checked")
		return
	}
	if r := pr.Rails[1]; r.NUMANode != 3 || r.BandwidthGbps != 25 {
		t.Errorf("rail on %s %+v: want NUMA node 3, 25 Gb/s", ifName, r)
	}
}

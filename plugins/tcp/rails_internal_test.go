package tcp

import (
	"net/netip"
	"testing"
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

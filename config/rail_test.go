package config_test

import (
	"strings"
	"testing"

	"github.com/ferrydev/ferry/config"
)

func TestParseRails(t *testing.T) {
	src := policyPlugins + `
rail "fast" {
  transport      = "tcp"
  device         = "10.1.0.1:0"
  numa_node      = 1
  bandwidth_gbps = 25
}
rail "slow" {
  transport = "tcp"
  device    = "10.2.0.1:0"
}
`
	c, err := config.Parse([]byte(src), "p.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Rails) != 2 {
		t.Fatalf("%d rails, want 2", len(c.Rails))
	}
	f, s := c.Rails[0], c.Rails[1]
	if f.Name != "fast" || f.Transport != "tcp" || f.Device != "10.1.0.1:0" || f.NUMANode == nil || *f.NUMANode != 1 || f.BandwidthGbps != 25 || f.DeclRange != "p.hcl:5:1" {
		t.Errorf("fast = %+v", f)
	}
	if s.NUMANode != nil || s.BandwidthGbps != 0 {
		t.Errorf("slow = %+v: unset numa_node and bandwidth must stay unset", s)
	}
}

func TestRailErrors(t *testing.T) {
	cases := []struct{ name, body, want string }{
		{"unknown transport", `rail "r" {
  transport = "rdma"
  device    = "mlx5_0"
}`, `p.hcl:5:15: rail.r.transport: "rdma" is not a configured plugin`},
		{"device missing", `rail "r" {
  transport = "tcp"
}`, `Missing required argument`},
		{"device empty", `rail "r" {
  transport = "tcp"
  device    = ""
}`, `p.hcl:6:15: rail.r.device: is empty`},
		{"duplicate", `rail "r" {
  transport = "tcp"
  device    = "a"
}
rail "r" {
  transport = "tcp"
  device    = "b"
}`, `p.hcl:8:1: rail.r: rail "r" is declared twice; the first is at p.hcl:4:1`},
		{"same device twice", `rail "r" {
  transport = "tcp"
  device    = "a"
}
rail "q" {
  transport = "tcp"
  device    = "a"
}`, `p.hcl:10:15: rail.q.device: "a" of transport "tcp" is already named by rail "r"`},
		{"numa", `rail "r" {
  transport = "tcp"
  device    = "a"
  numa_node = -2
}`, `p.hcl:7:15: rail.r.numa_node: -2`},
		{"bandwidth", `rail "r" {
  transport      = "tcp"
  device         = "a"
  bandwidth_gbps = "fast"
}`, `p.hcl:7:20: rail.r.bandwidth_gbps: want a number`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(policyPlugins+tc.body), "p.hcl")
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

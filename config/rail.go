package config

import (
	"github.com/ferrydev/ferry/sdk/conf"
	"github.com/hashicorp/hcl/v2"
)

// RailBlock is a rail block: a name for one rail of a transport, and what
// the plugin's probe cannot know about it.
//
//	rail "fast" {
//	  transport = "tcp"            # a configured plugin
//	  device    = "10.1.0.1:7100"  # the plugin's name for the rail; for TCP, the listen address as written
//	  numa_node = 0                # optional: the NUMA node of its NIC
//	  bandwidth_gbps = 25          # optional: nominal bandwidth, seeds the sprayer's estimate
//	}
//
// Policies name rails by a block's label or by the plugin's own name for
// the rail; rails without a block are used with what the probe found.
type RailBlock struct {
	Name      string
	Transport string
	Device    string
	// NUMANode overrides the probe's; nil keeps it.
	NUMANode *int
	// BandwidthGbps overrides the probe's; 0 keeps it.
	BandwidthGbps float64

	// DeclRange is where the block starts, like "engine.hcl:12:1".
	DeclRange string

	loc map[string]hcl.Range
}

// validateRail checks rail block i against the plugins and the rail
// blocks before it.
func (c *Config) validateRail(i int, first map[string]string) []error {
	r := &c.Rails[i]
	var errs []error
	l := labelled{kind: "rail", name: r.Name, decl: r.DeclRange, loc: r.loc}
	fail := l.failer(&errs)
	l.checkIdentity(fail, first, "", "rename or remove one")
	var plugins []string
	for _, pl := range c.Plugins {
		plugins = append(plugins, pl.Name)
	}
	if !contains(plugins, r.Transport) {
		fail("transport", "%q is not a configured plugin (configured: %s); add a plugin %q block or fix the name", r.Transport, conf.QuoteList(plugins), r.Transport)
	}
	if r.Device == "" {
		fail("device", "is empty; write the plugin's name for the rail (for tcp: one of its listen addresses, as written)")
	}
	for j := range i {
		if o := c.Rails[j]; o.Transport == r.Transport && o.Device == r.Device && r.Device != "" {
			fail("device", "%q of transport %q is already named by rail %q at %s", r.Device, r.Transport, o.Name, o.DeclRange)
		}
	}
	railTable.Check(r, "", l.has, fail)
	return errs
}

// RailsError returns an error located at the policy's rails attribute,
// for checks that need the plugins' probed rails (the engine makes them).
func (p *Policy) RailsError(format string, args ...any) error {
	return p.labelled().errorAt("rails", "policy."+p.Name+".rails", format, args...)
}

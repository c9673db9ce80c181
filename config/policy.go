package config

import (
	"github.com/ferrydev/ferry/sdk/conf"
	"github.com/hashicorp/hcl/v2"
)

// Policy is one policy block: which requests it matches and which
// transports carry them, in order. The engine evaluates policies in file
// order; the first that matches wins, unless a request names a policy.
type Policy struct {
	// Name is the block's label; requests may name it.
	Name string
	// Match is the conditions; all must hold. A policy without a match
	// block matches every request.
	Match PolicyMatch
	// Transports are plugin names, in the order to try them.
	Transports []string
	// Rails are the rails the policy allows; empty means any. A name is
	// a rail block's label or a plugin's own name for one of its rails;
	// the engine checks them against the probed rails when it starts.
	Rails []string

	// DeclRange is where the block starts, like "engine.hcl:12:1".
	DeclRange string

	loc map[string]hcl.Range // keyed by attribute name ("match.max_size")
}

// PolicyMatch is a policy's match block. Zero values match everything.
type PolicyMatch struct {
	Segment      string   // "memory" or "" for both ("file" is refused until file segments exist)
	SameMachine  *bool    // nil: either
	LocalMemory  string   // sdk.MemoryCPU's text, MemoryAny or "" (cuda and rocm are refused for now)
	RemoteMemory string   // likewise
	MinSize      int64    // inclusive
	MaxSize      int64    // inclusive; 0: no bound
	Priorities   []string // any of sdk.Priorities' names; empty: any
	Intents      []string // any of Intents; empty: any
}

// validatePolicy checks policy i against the plugins (every transport it
// names must be a configured plugin) and the policies before it.
func (c *Config) validatePolicy(i int, first map[string]string) []error {
	p := &c.Policies[i]
	var errs []error
	l := p.labelled()
	fail := l.failer(&errs)
	l.checkIdentity(fail, first, "", "rename or remove one")
	var plugins []string
	for _, pl := range c.Plugins {
		plugins = append(plugins, pl.Name)
	}
	if len(p.Transports) == 0 {
		fail("transports", `lists no transports; name the plugins to try, in order, like ["shm", "tcp"]`)
	}
	for k, t := range p.Transports {
		switch {
		case !contains(plugins, t):
			fail("transports", "%q is not a configured plugin (configured: %s); add a plugin %q block or remove it from the list", t, conf.QuoteList(plugins), t)
		case contains(p.Transports[:k], t):
			fail("transports", "%q is listed twice", t)
		}
	}
	for _, r := range p.Rails {
		if r == "" {
			fail("rails", "holds an empty rail name")
		}
	}
	// The words and ranges of every setting, match block included.
	policyTable.Check(p, "", l.has, fail)
	if m := p.Match; m.MaxSize > 0 && m.MinSize > m.MaxSize {
		fail("match.min_size", "%d bytes is above max_size %d bytes: the policy can never match", m.MinSize, m.MaxSize)
	}
	return errs
}

func (p *Policy) labelled() labelled {
	return labelled{kind: "policy", name: p.Name, decl: p.DeclRange, loc: p.loc}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

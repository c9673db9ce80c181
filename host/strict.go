package host

import (
	"errors"
	"fmt"
	"strings"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host/path"
)

// checkStarted applies the config's strict rule once every enabled plugin
// had its start: an engine that cannot move bytes, or that silently lacks
// a transport the operator asked for, fails here rather than at the first
// transfer. A plugin whose probe says its hardware is absent is not a
// failure: it was asked for on a machine without that hardware, and says
// so in its status. With strict = false the engine runs on what started
// and logs what is missing.
func checkStarted(cfg *config.Config, plugins []*path.Plugin, log hclog.Logger) error {
	var failed []string
	usable := 0
	for i, ps := range plugins {
		switch {
		case ps.Err() == nil:
			usable++
		case unavailable(ps):
		default:
			failed = append(failed, fmt.Sprintf("plugin %q (%s): %v", ps.Name(), pluginDecl(cfg, i), ps.Err()))
		}
	}
	var problems []string
	if len(failed) > 0 {
		problems = append(problems, strings.Join(failed, "; "))
	}
	if usable == 0 {
		problems = append(problems, fmt.Sprintf("no transport is usable (%d plugins enabled, none running)", len(plugins)))
	}
	if len(problems) == 0 {
		return nil
	}
	what := strings.Join(problems, "; and ")
	if !cfg.IsStrict() {
		log.Warn("running degraded (strict = false): " + what)
		return nil
	}
	return fmt.Errorf("%w: engine %q: %s; fix the plugin, disable its block (enabled = false), or set strict = false to run without it",
		ErrPluginFailed, cfg.Name, what)
}

// unavailable says whether ps did not start because its probe found no
// hardware for it.
func unavailable(ps *path.Plugin) bool {
	r := ps.Supervised().Run()
	return r != nil && !r.Probe.Available
}

// pluginDecl is where the i-th running plugin's block is in the config,
// for errors.
func pluginDecl(cfg *config.Config, i int) string {
	n := 0
	for _, pc := range cfg.Plugins {
		if !pc.Enabled {
			continue
		}
		if n == i {
			return pc.DeclRange
		}
		n++
	}
	return "?"
}

// checkPolicyRails fails when a policy names a rail that none of its
// transports has (by rail block label or the plugin's own rail name).
// Transports that are not running cannot say which rails they have; a
// name is only refused when every transport of the policy could.
// plugin finds a running plugin by name.
func checkPolicyRails(policies []config.Policy, plugin func(string) *path.Plugin) error {
	var errs []error
	for i := range policies {
		p := &policies[i]
		for _, name := range p.Rails {
			found, known := false, true
			for _, t := range p.Transports {
				ps := plugin(t)
				if ps == nil || ps.Rails() == nil {
					known = false
				} else if ps.Rails().Has(name) {
					found = true
				}
			}
			if !found && known {
				errs = append(errs, fmt.Errorf("%w: %w", ErrInvalid, p.RailsError("%q is not a rail of %s (rails: %s); name a rail block or one of the transports' rails", name, strings.Join(p.Transports, ", "), railNames(plugin, p.Transports))))
			}
		}
	}
	return errors.Join(errs...)
}

// railNames lists the rails of transports, as "transport:name" and
// "transport:label", for messages.
func railNames(plugin func(string) *path.Plugin, transports []string) string {
	var have []string
	for _, t := range transports {
		rs := plugin(t).Rails()
		for _, r := range rs.Rails() {
			have = append(have, t+":"+r.Name)
			if r.Label != "" {
				have = append(have, t+":"+r.Label)
			}
		}
	}
	return strings.Join(have, ", ")
}

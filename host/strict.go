package host

import (
	"fmt"
	"strings"

	"github.com/ferrydev/ferry/host/path"
)

// checkStarted applies the config's strict rule once every enabled plugin
// had its start: an engine that cannot move bytes, or that silently lacks
// a transport the operator asked for, fails here rather than at the first
// transfer. A plugin whose probe says its hardware is absent is not a
// failure: it was asked for on a machine without that hardware, and says
// so in Plugins. With strict = false the engine runs on what started and
// logs what is missing.
func (e *Engine) checkStarted() error {
	var failed []string
	usable := 0
	plugins := e.x.Plugins()
	for i, ps := range plugins {
		switch {
		case ps.Err() == nil:
			usable++
		case unavailable(ps):
		default:
			failed = append(failed, fmt.Sprintf("plugin %q (%s): %v", ps.Name(), e.pluginDecl(i), ps.Err()))
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
	if !e.cfg.IsStrict() {
		e.log.Warn("running degraded (strict = false): " + what)
		return nil
	}
	return fmt.Errorf("%w: engine %q: %s; fix the plugin, disable its block (enabled = false), or set strict = false to run without it",
		ErrPluginFailed, e.name, what)
}

// unavailable says whether ps did not start because its probe found no
// hardware for it.
func unavailable(ps *path.Plugin) bool {
	r := ps.Supervised().Run()
	return r != nil && !r.Probe.Available
}

// pluginDecl is where the i-th running plugin's block is in the config,
// for errors.
func (e *Engine) pluginDecl(i int) string {
	n := 0
	for _, pc := range e.cfg.Plugins {
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

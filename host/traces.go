package host

import "github.com/ferrydev/ferry/host/trace"

// attachTrace puts the trace recorder on the request path when the
// configuration has a trace block; New calls it before wiring the path.
func (e *Engine) attachTrace(o *options) {
	if e.cfg.Trace.Keep <= 0 {
		return
	}
	e.trace = trace.New(e.cfg.Trace.Keep, e.cfg.Trace.SampleEvery)
	o.path.Trace = e.trace
}

package host

import "github.com/ferrydev/ferry/host/trace"

// TaskTrace is the story of one traced task (host/trace): its stages with
// their times, transports, attempts, slices, the selector's reasons for
// each route, and the cause of each failed attempt.
type TaskTrace = trace.Story

// attachTrace puts the trace recorder on the request path when the
// configuration has a trace block; New calls it before wiring the path.
func (e *Engine) attachTrace(o *options) {
	if e.cfg.Trace.Keep <= 0 {
		return
	}
	e.trace = trace.New(e.cfg.Trace.Keep, e.cfg.Trace.SampleEvery)
	o.path.Trace = e.trace
}

// Traces returns the stories of the traced tasks: the finished ones,
// newest first, then those in progress. Nil without a trace block.
func (e *Engine) Traces() []TaskTrace {
	if e.trace == nil {
		return nil
	}
	return e.trace.Stories()
}

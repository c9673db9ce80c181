// Package trace keeps the story of chosen transfers: every stage a task
// passed (queued, admitted, routed, sliced, submitted, completed, retried,
// ended), when, on which transport and attempt, with the selector's
// reasons for its route and the cause of each failed attempt. It is an
// observe.Observer; the engine attaches it only when the configuration
// asks for traces (trace { keep = N }), so an engine without it pays
// nothing. Which tasks: those whose request asks (Request.Trace), and,
// with sample_every = N, one task in N. It owns the bounded memory of
// the stories (keep finished ones, at most that many in progress) and
// must not block the request path: Observe takes one short lock.
package trace

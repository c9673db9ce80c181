// Package observe is the one place that sees a task move through the
// request path: queued, admitted, routed, sliced, submitted, completed,
// retried and ended. Tracing, tests and applications attach an Observer
// with host.WithObserver; the engine reports every transition of every
// task to it. The engine's own metrics do not: they count at the same
// transitions into a metrics.Meter, which costs less than an event.
//
// It defines the events (with their clock and their cause words) and the
// interface only. It must not import the engine, keep state of its own
// or start goroutines; an observer that needs state (a histogram, a span
// table) keeps it. With no observer attached the engine does no work for
// it at all.
package observe

// Package selector decides which transports carry a request, in what order,
// and why.
//
// It owns the evaluation of transport policies: an explicit policy name on
// the request selects that policy, else the first policy whose match
// conditions hold wins; a per-request transport hint pins the first attempt;
// with no policy, a same-machine transport is preferred on one machine and
// otherwise the transports are tried in configured order. A transport that
// maps memory (no ForeignMemory capability) is never chosen when either
// buffer is memory an application allocated itself, one that reaches such
// memory only on this side (ForeignLocalOnly: shm) is never chosen when
// the target is, and the explanation names each usable transport's copy
// (one extra through a bounce buffer, or none). Every decision can be
// explained step by step.
//
// The package is pure: plain data in, plain data out. It must not do I/O,
// start goroutines, read clocks or know about plugins, rings or the
// metastore; the engine hands it the facts (what the request is, which
// transports the peer opened, which are running). Policies are compiled once
// by New so that Route, on the submit path, allocates nothing.
package selector

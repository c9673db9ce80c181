// Package soak is `ferry soak`: two engines in two processes move
// verified data over tcp and shm for a while, faults are injected one at
// a time (plugins killed or stopped on either side, the target engine or
// the metastore restarted, a link between network namespaces slowed or
// downed), and a report says, per fault kind, what the tasks ended as,
// which bytes read back were wrong, which calls hung, how long recovery
// took and how the initiator's FDs, goroutines and RSS drifted.
//
// Its pure parts are the range model (model.go: which write's bytes a
// COMPLETED read may show, and whether wrong bytes are an older write's
// or other), the pattern (pattern.go) and the report (report.go); the
// processes, the traffic and the faults are in run.go and faults.go.
// It must not be imported by the engine: it is a client of host.Engine
// like any application.
package soak

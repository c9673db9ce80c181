// Package credit is receiver credit, as plain data and functions of the
// time handed in: how much a sender may have in flight to one receiver
// over a two-sided transport (tcp), and how a receiver sizes what it
// grants.
//
// An Account is a sender's credit at one receiver: slices take credit
// (bytes and one request each) before they reach a plugin's lane and give
// it back as they complete; a sender that finds none waits on Wait. A
// run of small slices takes its credit at once (TakeRun) or not at all.
// High priority slices (Take) keep a reserve of the window that the
// others (TakeBulk) cannot use, so that they never wait for credit bulk
// holds. A grant replaces the account's window; Accept refuses one of another
// epoch (the receiver's incarnation), one that answers no request of this
// account or an old one (a replay), and one above the configured
// maximum. Reset returns every credit: the receiver restarted or went
// away.
//
// A Grantor is the receiver's side: per sender (name and incarnation) a
// window adapted by AIMD on the drain rate it measures from the senders'
// reports (see Grantor.Grant for the rule), each request numbered so that
// a replayed one is refused.
//
// The package owns no goroutine, socket or clock: host/credit.go asks
// for grants over host/control and feeds the answers in. It knows nothing
// of plugins or batches.
package credit

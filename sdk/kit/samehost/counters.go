package samehost

import "sync/atomic"

// Counters are the exchange's statistics, which a plugin embeds in its
// own and exports with Export. All are monotonic except ConnsOpen.
type Counters struct {
	Queries        atomic.Uint64 // region queries sent as dialer
	QueriesServed  atomic.Uint64 // region queries answered with the region
	QueriesRefused atomic.Uint64 // region queries answered with an error status
	RevokesSent    atomic.Uint64
	RevokesRecv    atomic.Uint64
	RevokeTimeouts atomic.Uint64 // peers that did not drop a region within the revoke timeout
	ConnsAccepted  atomic.Uint64
	ConnsDialed    atomic.Uint64
	ConnsOpen      atomic.Int64 // connections open now, dialed and accepted
	DialFailures   atomic.Uint64
	HelloRejected  atomic.Uint64 // hellos refused (as server) or refused to us (as dialer)
	CredRejected   atomic.Uint64 // connections refused by the SO_PEERCRED check, either side
	Malformed      atomic.Uint64 // messages that could not be decoded; the connection is dropped
	OffersRefused  atomic.Uint64 // regions a peer offered that this side would not take
	AcceptErrors   atomic.Uint64 // accept failures (EMFILE...), retried after a pause
	ConnsRefused   atomic.Uint64 // connections closed at once: max_conns reached
	AuthFailed     atomic.Uint64 // peers refused for the cluster secret, either side
}

// Export adds the counters to m under their Stats names.
func (c *Counters) Export(m map[string]uint64) {
	m["queries"] = c.Queries.Load()
	m["queries_served"] = c.QueriesServed.Load()
	m["queries_refused"] = c.QueriesRefused.Load()
	m["revokes_sent"] = c.RevokesSent.Load()
	m["revokes_recv"] = c.RevokesRecv.Load()
	m["revoke_timeouts"] = c.RevokeTimeouts.Load()
	m["conns_accepted"] = c.ConnsAccepted.Load()
	m["conns_dialed"] = c.ConnsDialed.Load()
	m["conns_open"] = uint64(max(c.ConnsOpen.Load(), 0))
	m["dial_failures"] = c.DialFailures.Load()
	m["hello_rejected"] = c.HelloRejected.Load()
	m["cred_rejected"] = c.CredRejected.Load()
	m["malformed"] = c.Malformed.Load()
	m["offers_refused"] = c.OffersRefused.Load()
	m["accept_errors"] = c.AcceptErrors.Load()
	m["conns_refused"] = c.ConnsRefused.Load()
	m["auth_failed"] = c.AuthFailed.Load()
}

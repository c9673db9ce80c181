package nvlink

import "sync/atomic"

// counters are the plugin's own counters; Stats adds the outcomes.
type counters struct {
	bytesWritten, bytesRead     atomic.Uint64
	imports                     atomic.Uint64 // handles imported (local registrations and peers' regions)
	importFailures              atomic.Uint64 // peers' handles that did not import (stale, no backend)
	importsOpen                 atomic.Int64  // peers' regions imported or mapped now
	queries, queriesServed      atomic.Uint64
	queriesRefused              atomic.Uint64
	revokesSent, revokesRecv    atomic.Uint64
	revokeTimeouts              atomic.Uint64
	copiesSliced, copyErrors    atomic.Uint64
	unsupported                 atomic.Uint64
	credRejected, authFailed    atomic.Uint64
	helloRejected, malformed    atomic.Uint64
	dialFailures, offersRefused atomic.Uint64
	connsDialed                 atomic.Uint64
	connsOpen                   atomic.Int64 // connections dialed, open now
}

func (c *counters) snapshot() map[string]uint64 {
	return map[string]uint64{
		"bytes_written":   c.bytesWritten.Load(),
		"bytes_read":      c.bytesRead.Load(),
		"imports":         c.imports.Load(),
		"import_failures": c.importFailures.Load(),
		"imports_open":    uint64(max(c.importsOpen.Load(), 0)),
		"queries":         c.queries.Load(),
		"queries_served":  c.queriesServed.Load(),
		"queries_refused": c.queriesRefused.Load(),
		"revokes_sent":    c.revokesSent.Load(),
		"revokes_recv":    c.revokesRecv.Load(),
		"revoke_timeouts": c.revokeTimeouts.Load(),
		"copies_sliced":   c.copiesSliced.Load(),
		"copy_errors":     c.copyErrors.Load(),
		"unsupported":     c.unsupported.Load(),
		"cred_rejected":   c.credRejected.Load(),
		"auth_failed":     c.authFailed.Load(),
		"hello_rejected":  c.helloRejected.Load(),
		"malformed":       c.malformed.Load(),
		"dial_failures":   c.dialFailures.Load(),
		"offers_refused":  c.offersRefused.Load(),
		"conns_dialed":    c.connsDialed.Load(),
		"conns_open":      uint64(max(c.connsOpen.Load(), 0)),
	}
}

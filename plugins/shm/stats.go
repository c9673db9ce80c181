package shm

import (
	"fmt"
	"sync/atomic"
)

// counters are the plugin's statistics, exported through Stats. All are
// monotonic except maps_open and conns_open.
type counters struct {
	bytesWritten   atomic.Uint64 // bytes copied into peers' regions
	bytesRead      atomic.Uint64 // bytes copied out of peers' regions
	copiesInline   atomic.Uint64 // copies done in Submit (or in the reply reader)
	copiesPooled   atomic.Uint64 // copies handed to the worker pool in one piece
	copiesBulk     atomic.Uint64 // low-priority copies handed to the nice pool (bulk_nice)
	copiesSplit    atomic.Uint64 // copies cut into several chunks over several workers
	chunks         atomic.Uint64 // chunks the workers ran
	mapsCreated    atomic.Uint64 // peer regions mapped
	mapsDropped    atomic.Uint64 // peer mappings unmapped (revoke, close peer, stop, broken connection)
	mapsOpen       atomic.Int64
	queries        atomic.Uint64 // region queries sent as dialer
	queriesServed  atomic.Uint64 // region queries answered with an fd
	queriesRefused atomic.Uint64 // region queries answered with an error status
	revokesSent    atomic.Uint64
	revokesRecv    atomic.Uint64
	revokeTimeouts atomic.Uint64 // peers that did not unmap within revoke_timeout
	connsAccepted  atomic.Uint64
	connsDialed    atomic.Uint64
	connsOpen      atomic.Int64
	dialFailures   atomic.Uint64
	helloRejected  atomic.Uint64 // hellos refused (as server) or refused to us (as dialer)
	credRejected   atomic.Uint64 // connections refused by the SO_PEERCRED check, either side
	malformed      atomic.Uint64 // messages that could not be decoded; the connection is dropped
	offersRefused  atomic.Uint64 // regions a peer offered that were not mapped (wrong size, max_mapped_bytes)
	acceptErrors   atomic.Uint64 // accept failures (EMFILE...), retried after a pause
	connsRefused   atomic.Uint64 // connections closed at once: max_conns reached
	authFailed     atomic.Uint64 // peers refused for the cluster secret (none, or a proof that does not verify), either side
	foreignCopied  atomic.Uint64 // bytes copied between memory the application allocated itself and peers' mappings
	foreignFaults  atomic.Uint64 // such copies that failed (the application freed the memory, or attach was denied)
}

func (c *counters) snapshot(workers []*worker) map[string]uint64 {
	pos := func(v int64) uint64 { return uint64(max(v, 0)) }
	m := map[string]uint64{
		"bytes_written":   c.bytesWritten.Load(),
		"bytes_read":      c.bytesRead.Load(),
		"copies_inline":   c.copiesInline.Load(),
		"copies_pooled":   c.copiesPooled.Load(),
		"copies_bulk":     c.copiesBulk.Load(),
		"copies_split":    c.copiesSplit.Load(),
		"chunks":          c.chunks.Load(),
		"maps_created":    c.mapsCreated.Load(),
		"maps_dropped":    c.mapsDropped.Load(),
		"maps_open":       pos(c.mapsOpen.Load()),
		"queries":         c.queries.Load(),
		"queries_served":  c.queriesServed.Load(),
		"queries_refused": c.queriesRefused.Load(),
		"revokes_sent":    c.revokesSent.Load(),
		"revokes_recv":    c.revokesRecv.Load(),
		"revoke_timeouts": c.revokeTimeouts.Load(),
		"conns_accepted":  c.connsAccepted.Load(),
		"conns_dialed":    c.connsDialed.Load(),
		"conns_open":      pos(c.connsOpen.Load()),
		"dial_failures":   c.dialFailures.Load(),
		"hello_rejected":  c.helloRejected.Load(),
		"cred_rejected":   c.credRejected.Load(),
		"malformed":       c.malformed.Load(),
		"offers_refused":  c.offersRefused.Load(),
		"accept_errors":   c.acceptErrors.Load(),
		"conns_refused":   c.connsRefused.Load(),
		"auth_failed":     c.authFailed.Load(),
		"copy_workers":    uint64(len(workers)),

		"foreign_bytes_copied": c.foreignCopied.Load(),
		"foreign_copy_faults":  c.foreignFaults.Load(),
	}
	for i, w := range workers {
		m[fmt.Sprintf("worker%d_chunks", i)] = w.chunks.Load()
	}
	return m
}

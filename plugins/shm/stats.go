package shm

import (
	"fmt"
	"sync/atomic"

	"github.com/ferrydev/ferry/sdk/kit/samehost"
)

// counters are the plugin's statistics, exported through Stats: the
// exchange's (samehost.Counters) and the copies' and mappings'. All are
// monotonic except maps_open and conns_open.
type counters struct {
	samehost.Counters

	bytesWritten  atomic.Uint64 // bytes copied into peers' regions
	bytesRead     atomic.Uint64 // bytes copied out of peers' regions
	copiesInline  atomic.Uint64 // copies done in Submit (or in the reply reader)
	copiesPooled  atomic.Uint64 // copies handed to the worker pool in one piece
	copiesBulk    atomic.Uint64 // low-priority copies handed to the nice pool (bulk_nice)
	copiesSplit   atomic.Uint64 // copies cut into several chunks over several workers
	chunks        atomic.Uint64 // chunks the workers ran
	mapsCreated   atomic.Uint64 // peer regions mapped
	mapsDropped   atomic.Uint64 // peer mappings unmapped (revoke, close peer, stop, broken connection)
	mapsOpen      atomic.Int64
	foreignCopied atomic.Uint64 // bytes copied between memory the application allocated itself and peers' mappings
	foreignFaults atomic.Uint64 // such copies that failed (the application freed the memory, or attach was denied)
}

func (c *counters) snapshot(workers []*worker) map[string]uint64 {
	pos := func(v int64) uint64 { return uint64(max(v, 0)) }
	m := map[string]uint64{
		"bytes_written": c.bytesWritten.Load(),
		"bytes_read":    c.bytesRead.Load(),
		"copies_inline": c.copiesInline.Load(),
		"copies_pooled": c.copiesPooled.Load(),
		"copies_bulk":   c.copiesBulk.Load(),
		"copies_split":  c.copiesSplit.Load(),
		"chunks":        c.chunks.Load(),
		"maps_created":  c.mapsCreated.Load(),
		"maps_dropped":  c.mapsDropped.Load(),
		"maps_open":     pos(c.mapsOpen.Load()),
		"copy_workers":  uint64(len(workers)),

		"foreign_bytes_copied": c.foreignCopied.Load(),
		"foreign_copy_faults":  c.foreignFaults.Load(),
	}
	c.Counters.Export(m)
	for i, w := range workers {
		m[fmt.Sprintf("worker%d_chunks", i)] = w.chunks.Load()
	}
	return m
}

package nvlink

import (
	"sync/atomic"

	"github.com/ferrydev/ferry/sdk/kit/samehost"
)

// counters are the plugin's own counters: the exchange's
// (samehost.Counters), the imports' and the copies'; Stats adds the
// outcomes.
type counters struct {
	samehost.Counters

	bytesWritten, bytesRead  atomic.Uint64
	imports                  atomic.Uint64 // handles imported (local registrations and peers' regions)
	importFailures           atomic.Uint64 // peers' handles that did not import (stale, no backend)
	importsOpen              atomic.Int64  // peers' regions imported or mapped now
	copiesSliced, copyErrors atomic.Uint64
	unsupported              atomic.Uint64
}

func (c *counters) snapshot() map[string]uint64 {
	m := map[string]uint64{
		"bytes_written":   c.bytesWritten.Load(),
		"bytes_read":      c.bytesRead.Load(),
		"imports":         c.imports.Load(),
		"import_failures": c.importFailures.Load(),
		"imports_open":    uint64(max(c.importsOpen.Load(), 0)),
		"copies_sliced":   c.copiesSliced.Load(),
		"copy_errors":     c.copyErrors.Load(),
		"unsupported":     c.unsupported.Load(),
	}
	c.Counters.Export(m)
	return m
}

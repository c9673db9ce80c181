package remotes

import "sync/atomic"

// lifeCounts count the table's handle lifecycle, for metrics.
type lifeCounts struct {
	opened  atomic.Uint64 // new handles
	retired atomic.Uint64 // handles retired: their peer came back with a new incarnation
}

// Counts is the table's handles now, and their lifecycle so far.
type Counts struct {
	// Open handles in the table; Retired and Gone are among them.
	Open, Retired, Gone int
	// Opened counts handles opened; Retirements, handles retired because
	// the peer's incarnation changed.
	Opened, Retirements uint64
}

// Counts returns the table's counts. It is lock-free, as Get is.
func (t *Table) Counts() Counts {
	c := Counts{Opened: t.counts.opened.Load(), Retirements: t.counts.retired.Load()}
	for _, h := range t.handles.load() {
		switch {
		case h == nil:
			continue
		case h.Retired != "":
			c.Retired++
		case h.Gone != "":
			c.Gone++
		}
		c.Open++
	}
	return c
}

package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/host/selector"
)

// benchProgress tells the operator where a bench is while it runs, on
// stderr, so that a sweep of minutes is not silent. On a terminal one
// line shows the current phase (starting the engines, each Ferry and
// baseline round, verifying) and is rewritten in place; each row of a
// sweep leaves one line with its figures. Elsewhere (a log, a pipe) only
// those per-row lines are written, one per size, a modest rate. A
// single-size run on a pipe writes nothing: its table follows at once.
// A nil *benchProgress writes nothing.
type benchProgress struct {
	w    io.Writer
	live bool // w is a terminal: phases rewrite one line
	rows int  // sizes in the run
	// The row in progress: its number, size and start.
	i     int
	size  int64
	start time.Time
	shown bool // a phase line is on the terminal, to be cleared
}

// newBenchProgress reports on w (a terminal or not) a run of rows sizes;
// with on false it is nil: nothing is written.
func newBenchProgress(w *os.File, rows int, on bool) *benchProgress {
	if !on {
		return nil
	}
	_, err := unix.IoctlGetTermios(int(w.Fd()), unix.TCGETS)
	return &benchProgress{w: w, live: err == nil, rows: rows}
}

func (p *benchProgress) startRow(i int, size int64) {
	if p == nil {
		return
	}
	p.i, p.size, p.start = i, size, time.Now()
}

func (p *benchProgress) prefix() string {
	return fmt.Sprintf("ferry bench [%d/%d] %s", p.i+1, p.rows, selector.FormatSize(uint64(p.size)))
}

// phase shows what the row does now, on a terminal.
func (p *benchProgress) phase(what string) {
	if p == nil || !p.live {
		return
	}
	fmt.Fprintf(p.w, "\r\x1b[K%s: %s (%.1fs)", p.prefix(), what, time.Since(p.start).Seconds())
	p.shown = true
}

// clear removes the phase line.
func (p *benchProgress) clear() {
	if p == nil || !p.shown {
		return
	}
	fmt.Fprint(p.w, "\r\x1b[K")
	p.shown = false
}

// rowDone writes the line of a measured row (err: its verification's).
func (p *benchProgress) rowDone(row benchRow, err error) {
	if p == nil {
		return
	}
	p.clear()
	if p.rows == 1 {
		return
	}
	line := fmt.Sprintf("%s: %s %s %.3f GB/s, p50 %.1f µs", p.prefix(), row.Transport, row.Op, row.Gbps, row.P50us)
	if row.Baseline != "" {
		line += fmt.Sprintf("; baseline %s %.3f GB/s", row.Baseline, row.BaselineGbps)
	}
	switch {
	case err != nil:
		line += "; NOT verified"
	case row.Verified:
		line += "; verified"
	}
	fmt.Fprintf(p.w, "%s (%.1fs)\n", line, time.Since(p.start).Seconds())
}

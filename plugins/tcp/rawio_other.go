//go:build !linux

package tcp

import (
	"sync/atomic"
	"time"
)

// rawReader is Linux only; elsewhere link falls back to net.Conn.Read.
type rawReader struct{}

func newRawReader(nc interface{}) *rawReader { return nil }

func (r *rawReader) readv(a, b []byte, wait bool) (int, error) { panic("unreachable") }

func (r *rawReader) setStop(*atomic.Bool) {}

func (r *rawReader) quiesce() {}

func (r *rawReader) setBlock(bool) {}

func (r *rawReader) markClosed() {}

func (r *rawReader) setDeadline(time.Time) {}

// rawWriter is Linux only; elsewhere every frame goes through the slot's
// writer goroutine.
type rawWriter struct{}

func newRawWriter(nc interface{}) *rawWriter { return nil }

func (w *rawWriter) writev(v [][]byte) (int, error) { panic("unreachable") }

//go:build !linux

package tcp

// rawReader is Linux only; elsewhere link falls back to net.Conn.Read.
type rawReader struct{}

func newRawReader(nc interface{}) *rawReader { return nil }

func (r *rawReader) readv(a, b []byte, wait bool) (int, error) { panic("unreachable") }

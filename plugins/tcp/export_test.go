package tcp

// ApplyingFrame reports whether a connection the transport serves is in
// the middle of a frame that reads into a region: a test's way to know
// that a half-sent frame reached the listener, without reading memory
// the listener writes.
func ApplyingFrame(t *Transport) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for sc := range t.servers {
		if r := sc.cur.Load(); r != nil && r != flushing {
			return true
		}
	}
	return false
}

package host

import "github.com/ferrydev/ferry/host/segment"

// SegmentHandle returns what e caches of open segment id: why the handle
// is retired ("" while it is not), whether its descriptor left the
// metastore, and the buffers it knows. ok is false when id is not open.
func SegmentHandle(e *Engine, id SegmentID) (retired string, gone bool, bufs []segment.Buffer, ok bool) {
	h := e.segs.Get(uint32(id))
	if h == nil {
		return "", false, nil, false
	}
	return h.Retired, h.Gone != "", h.Desc.Buffers, true
}

// SegmentsChanged returns a channel closed at the next change of any of
// e's open segments.
func SegmentsChanged(e *Engine) <-chan struct{} { return e.segs.Changed() }

package host

import "fmt"

// SegmentInfo returns what the engine knows of an open segment, as
// OpenSegment and ImportSegment returned it, from the descriptor it last
// read (TENT's getSegmentInfo). A segment not open is ErrSegmentNotFound.
func (e *Engine) SegmentInfo(id SegmentID) (Segment, error) {
	if e.x.Closed() {
		return Segment{}, ErrClosed
	}
	rem := e.segs.Get(uint32(id))
	if rem == nil {
		return Segment{}, fmt.Errorf("%w: segment info: segment handle %d is not open", ErrSegmentNotFound, id)
	}
	return segmentOf(rem, e.x.Plugins()), nil
}

package host

// SegmentStatus is one open remote segment as `ferry status` shows it.
type SegmentStatus struct {
	ID          SegmentID `json:"id"`
	Name        string    `json:"name"`
	Incarnation uint64    `json:"incarnation"`
	SameMachine bool      `json:"same_machine"`
	Transports  []string  `json:"transports"` // open in this engine
	Buffers     int       `json:"buffers"`
	Retired     string    `json:"retired,omitempty"`
	Gone        string    `json:"gone,omitempty"`
}

// segmentStatuses lists the open remote segments.
func (e *Engine) segmentStatuses() []SegmentStatus {
	var out []SegmentStatus
	for _, h := range e.segs.All() {
		s := SegmentStatus{ID: SegmentID(h.ID), Name: h.Name, Retired: h.Retired, Gone: h.Gone}
		if h.Desc != nil {
			s.Incarnation, s.SameMachine, s.Buffers = h.Desc.Incarnation, h.Desc.MachineID == e.machineID, len(h.Desc.Buffers)
		}
		for i, ok := range h.Opened {
			if ok {
				s.Transports = append(s.Transports, e.x.Plugins()[i].Name())
			}
		}
		out = append(out, s)
	}
	return out
}

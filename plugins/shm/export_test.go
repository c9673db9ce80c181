package shm

// Reporting says whether the connection to peer id keeps a tally of
// what it moves, to report it (served.go); connected is false before the
// peer is dialed.
func (t *Transport) Reporting(id uint32) (reporting, connected bool) {
	p := t.base.Peers.Get(id)
	if p == nil {
		return false, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dc == nil {
		return false, false
	}
	return p.dc.tally != nil, true
}

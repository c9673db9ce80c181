package host

// WaitLanes returns the names of the plugins whose lanes a waiter on id
// polls (spinWait), one name per lane.
func WaitLanes(e *Engine, id BatchID) []string {
	var names []string
	for _, l := range e.waitLanes(id.b, nil) {
		for _, ps := range e.plugins {
			if ps.usable() {
				for _, pl := range ps.run().lanes {
					if pl == l {
						names = append(names, ps.name)
					}
				}
			}
		}
	}
	return names
}

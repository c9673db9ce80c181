package host

// WaitLanes returns the names of the plugins whose lanes a waiter on id
// polls (Tracker.WaitBatch), one name per lane.
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

// LanesWaited returns, per lane of the plugin name, whether the plugin
// sees a caller waiting on it (progress.Lane.Waited).
func LanesWaited(e *Engine, name string) []bool {
	var w []bool
	for _, ps := range e.plugins {
		if ps.name == name && ps.usable() {
			for _, l := range ps.run().lanes {
				w = append(w, l.Waited())
			}
		}
	}
	return w
}

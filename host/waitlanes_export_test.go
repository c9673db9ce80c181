package host

// WaitLanes returns the names of the plugins whose lanes a waiter on id
// polls (Tracker.WaitBatch), one name per lane.
func WaitLanes(e *Engine, id BatchID) []string {
	var names []string
	for _, l := range e.x.WaitLanes(id) {
		for _, ps := range e.x.Plugins() {
			if ps.Usable() {
				for _, pl := range ps.Lanes() {
					if pl == l {
						names = append(names, ps.Name())
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
	for _, ps := range e.x.Plugins() {
		if ps.Name() == name && ps.Usable() {
			for _, l := range ps.Lanes() {
				w = append(w, l.Waited())
			}
		}
	}
	return w
}

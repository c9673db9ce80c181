package host

import "github.com/ferrydev/ferry/host/device"

// DeviceRegions returns e's registered device memory.
func DeviceRegions(e *Engine) []device.Region { return e.devs.Regions() }

// DevicePID returns the pid of e's running device plugin name, 0 when
// it runs none.
func DevicePID(e *Engine, name string) int {
	for _, s := range e.devs.Statuses() {
		if s.Name == name {
			return s.Pid
		}
	}
	return 0
}

// StagingSlotsInUse returns how many of e's staging slots are out.
func StagingSlotsInUse(e *Engine) int {
	pool, _ := e.x.StagingPool()
	if pool == nil {
		return 0
	}
	return pool.Stats().Used
}

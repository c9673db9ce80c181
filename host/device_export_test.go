package host

import "github.com/ferrydev/ferry/host/device"

// DeviceRegions returns e's registered device memory.
func DeviceRegions(e *Engine) []device.Region { return e.devs.Regions() }

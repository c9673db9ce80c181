// Package device is an engine's device memory: the device plugins it
// runs (devices/cuda, devices/rocm, the simulated plugins/simdev), the
// device ranges the application registered, and the copies between
// device memory and host slots that staging asks for.
//
// A device plugin is started on first use (the first registration or
// allocation of device memory, or a peer's staging into it), not with the
// engine: an engine without device memory never runs one. A plugin
// without its driver says why (Probe) and is not asked again; one that
// died is started again on next use, and what it held (imports, host
// registrations) is given to it again before it is used.
//
// Device memory never enters this process: a registration is an export
// handle (sdk.Handle) that the plugin imports, found by the plugin
// (Identify) or handed in by the application, which exported it with its
// own driver. Regions are numbered from FirstRegion, apart from host
// memory's, and published in the engine's descriptor with their kind.
//
// The package holds no lock across a plugin call: the table's lock
// guards only the table, and a plugin that is starting is waited for on
// a channel.
package device

// Package gpu is the machinery the GPU device plugins (devices/cuda,
// devices/rocm) share: it implements sdk.Device over a Driver, the small
// binding to one vendor library, so that the two plugins differ only in
// that binding.
//
// It owns the threads. A driver's current device (CUDA's context, HIP's
// hipSetDevice) is per OS thread, and Go moves goroutines between threads,
// so every driver call for a device runs on that device's worker: one
// goroutine locked to its OS thread (runtime.LockOSThread) that made the
// device current once (Driver.Bind) and then runs jobs from a queue. Copy
// appends a job and returns; control methods append one and wait for it. No
// lock is held while a driver call runs. Each device has a few streams
// (config `streams`), used in turn; each stream has a completion goroutine,
// also locked and bound, that waits on the events the worker recorded
// after each copy, in the stream's order, and reports each copy exactly
// once. Calls that concern no device (loading the library, listing
// devices) run on a short-lived locked goroutine.
//
// It also owns the tables: regions (imports and host registrations), the
// plugin's own allocations, and the per-device cache of opened IPC
// handles (an open costs 142 ms on an H200, so one open per allocation
// serves every region that names it, refcounted). The cache is touched
// only by its device's worker, which orders opens and closes of one handle.
//
// It must not touch memory it was not given, and must not call the driver
// from any goroutine but a worker, a completion goroutine or the probe
// goroutine.
package gpu

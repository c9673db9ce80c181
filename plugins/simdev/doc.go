// Package simdev is ferry-device-simdev, a simulated device plugin: a TEST
// TOOL, like plugins/fault, never to be configured in production. It
// simulates GPU hardware these machines lack, so that the host's
// device-aware paths (kind-aware selection, staging through host memory,
// device-to-device copies, handle import between processes) run for real
// in CI. It reports Kind sdk.MemoryCUDA with DeviceInfo.Simulated = true
// and exports sdk.HandleSim handles only.
//
// Configuration (the device block's `config { ... }` body):
//
//	config {
//	  devices        = 2         # simulated devices; default 2, at most 64
//	  memory         = "1GiB"    # per device; default 1GiB, at most 256GiB
//	  copy_bandwidth = "2GB/s"   # Copy's throughput, all copies together; default unlimited
//	}
//
// copy_bandwidth lets a test make the device the slowest hop of a
// transfer.
//
// Memory. Each Allocate makes a memfd of its own, named
// "ferry-simdev-<allocation id>", sealed against growing and shrinking and
// mapped in this process. Its address comes from device d's simulated
// range, starting at 0x4000_0000_0000 + d * 256GiB, 2 MiB aligned: numbers
// that look like a GPU's and that no process can dereference. Identify
// answers for ranges inside a live allocation, whatever the pid (the
// simulated device owns its address space, as a driver does), and
// ErrNotDevice otherwise, also for a range that runs past its
// allocation's end.
//
// Handles. A HandleSim's Data is 16 bytes, little-endian:
//
//	[0:4)   pid of the simdev process (uint32)
//	[4:8)   fd number of the allocation's memfd in it (uint32)
//	[8:16)  allocation id (uint64)
//
// Size is the whole allocation's, Offset and Length the range's. Any
// process of the same user opens it through /proc/<pid>/fd/<fd> and checks
// that the file is the memfd named for the allocation id (a freed
// allocation's fd number may be reused): package simmem does this for Go
// code (simmem.Open), and the Python package does the same. Import opens
// another process's handle that way, and one of its own allocations
// directly. Free closes the memfd, so later imports and opens fail with
// ErrStaleHandle while existing mappings stay valid. A handle of a device
// index simdev does not have fails Import with ErrNoDevice.
//
// Copy is a memmove between mapped ranges (imported device ranges and
// host regions the SDK mapped), run by a pool of two workers the Device
// owns and Stop ends; a region it does not know or a range out of bounds
// completes StatusInvalid.
//
// It must not touch memory outside an allocation, an import or a
// registered host region, and every copy completes exactly once.
package simdev

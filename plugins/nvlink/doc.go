// Package nvlink is Ferry's same-machine device transport (plugin
// "nvlink"): it moves bytes between GPU memory (and host memory) of
// engines in different processes on one machine by importing the
// exported handles of each other's device regions and copying with the
// device's own engine. It owns the region exchange with peer plugins
// (wire.go, server.go, peer.go, on sdk/kit/samehost as shm's, with handles), the copy streams
// (transport.go) and the backends (backend.go, cudabackend.go). It must
// not trust a peer: bounds, permission, region and incarnation checks
// happen before a byte moves, and a handle that does not import fails the
// descriptor, never the process.
//
// Regions. Host memory arrives as any transport's (RegisterMemory, a
// memfd the SDK mapped). Device memory arrives as a handle
// (sdk.DeviceImporter.RegisterDevice), imported at once by the backend of
// its type, so that a stale handle is refused at registration
// (sdk.ErrStaleHandle). Backends: "cuda", the real one (libcuda loaded
// with dlopen, internal/cuda; HandleCUDAIPC and HandleCUDAFD, see
// cudaBackend for the handle data it assumes), and "sim", a SIMULATED
// device for CI (HandleSim, plugins/simdev/simmem), whose copies are
// memcpys. A copy between device memory of two backends is refused with
// StatusUnsupported; host to host is a memcpy.
//
// Exchange. sdk/kit/samehost, as shm: an abstract SOCK_SEQPACKET socket
// per plugin, the endpoint {v, socket, machine}, SO_PEERCRED (same user
// or root), the hello naming segment and incarnation
// (StatusStaleIncarnation), the cluster secret's HMAC proofs under the
// label "ferry-nvlink/1", at most max_conns (1024) peer connections
// served at once. This plugin's part is its wire format (wire.go) and
// what it answers (server.go). A dialer asks for a region
// once; the owner answers with its handle (device: the handle's range is
// exactly the region) or its memfd (host: exactly the region, read-only
// for remote-read), never for a local-only region (StatusPermission). The
// dialer imports the handle with its own backend (a legacy CUDA IPC open
// costs 142 ms) and caches it per (peer, region) until the owner revokes
// it (UnregisterMemory waits for the acknowledgement, revoke_timeout),
// the connection ends, ClosePeer or Stop. A peer's handle that does not
// import (its allocation freed) fails the descriptors waiting for it with
// StatusInvalid and the reason in the log; nothing is cached, so a later
// descriptor asks again.
//
// What the owner cannot enforce. A device handle opens the whole
// allocation, not just the region, and a CUDA import is writable: a
// remote-read device region is read-only because this plugin refuses a
// write before it starts one (StatusPermission), not because the driver
// would. The cluster secret keeps plugins without it from getting a
// handle at all.
//
// Copies run on `streams` goroutines (default 4), each locked to its OS
// thread with a CUDA stream per device; from split_min (8 MiB) a copy is
// sliced into page-aligned pieces of at least 2 MiB over consecutive
// streams. Submit never blocks: the import of a remote region runs on the
// peer's connection reader, copies on the streams.
package nvlink

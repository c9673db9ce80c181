// Package shm is Ferry's same-machine transport (plugin "shm"): it
// moves bytes between this engine's registered memory and a peer engine's
// registered memory on the same machine by mapping the peer's regions into
// this plugin and copying with sdk/memcpy (copy that keeps copies which fit
// the cache in it): one copy end to end, no socket on
// the data path. It owns the region exchange with peer plugins (wire.go,
// server.go, peer.go), the copy engine (copy.go) and the region table
// (region.go). Memory the host's application allocated itself (a local
// region with no memfd) is copied with process_vm_readv/writev straight
// between the host process and the peer's mapping, in place of the memcpy
// (foreign.go); a peer's such memory is not reachable through shm
// (Describe's ForeignLocalOnly). It must not copy payload through any other buffer, and it
// must not trust a peer: every bounds, permission, region and incarnation
// check happens before memory is touched, and nothing a peer sends can
// make it map a file that could shrink under it (sdk/shm.Map refuses an
// unsealed one) or panic.
//
// Region exchange. At Start the plugin listens on a SOCK_SEQPACKET unix
// socket in the Linux abstract namespace, named
// "@ferry-shm/<sha256(engine)[:8]>/<incarnation>/<random>": nothing exists
// on disk, so nothing is left behind when the process is killed. The
// endpoint blob is versioned JSON {v, socket, machine}, machine being the
// id the host passed at Start (the host publishes a hash, never the raw
// /etc/machine-id) or, started without one, a hash of this machine's id
// (kit.MachineID). OpenPeer refuses a peer whose machine id differs from
// ours. The first descriptor for a peer
// dials its socket (from the peer's own goroutine, never in Submit); both
// sides check SO_PEERCRED (same uid, or root) and the server checks that
// the hello names its segment and current incarnation
// (StatusStaleIncarnation otherwise, StatusPermission for another user).
// With cluster_secret (or cluster_secret_file) set, both sides also prove
// they know the secret, HMACs over fresh nonces (sdk/kit/samehost), before the
// server answers any query: a process without it gets StatusPermission and
// no fd at all. The dialer then asks for each region it needs once; the
// server answers with length, permission and a registration generation,
// and an fd as SCM_RIGHTS - only for remote-read and remote-read-write
// regions; a local-only region's fd never leaves the process
// (StatusPermission).
//
// What leaves the process is exactly the region. The host passes each
// region peers may use as a memfd of exactly its bytes: the allocation's
// own when the region is the whole allocation, else one carved out of it
// at Register (the host's local-memory table). This plugin hands a memfd
// to a peer only when it is exactly the region (offset 0, file size =
// length), so a region that is not page-aligned in its allocation, which
// cannot be carved, is refused with StatusUnsupported: its memfd would
// carry local-only or unregistered bytes with it; the engine then moves
// the task to its next transport (tcp). Align such buffers to keep them
// on shm. A remote-read region
// goes as the memfd reopened O_RDONLY through /proc/self/fd, which
// cannot be mapped writable and shared. A read-only descriptor alone does
// not stop a process of the same user that receives it: it can open its
// own /proc/self/fd/N (or /proc/PID/fd/N of any holder) read-write again,
// since the kernel checks the memfd inode's mode, not how it was opened.
// So the host seals such a region's memfd with F_SEAL_FUTURE_WRITE once
// it has mapped it (host/localmem/seal.go): nobody can write(2) it or map
// it writable any more, however it opens it, while the application's
// mapping stays writable. This plugin then gets the region sealed
// (sdk.Region with Mem read-only and Foreign, the host's memory): it
// serves peers and sends from Mem, and writes a read into it through the
// host (process_vm_writev), as it does memory the application allocated;
// a restarted plugin maps it read-only again. Where a plugin cannot take
// sealed regions (an older SDK) or the system forbids plugins to attach
// to the host (ptrace_scope 2 or 3), regions are not sealed and
// read-only holds only against a peer that does not reopen the file; the
// cluster secret still keeps a process without it from getting the fd.
//
// The dialer never trusts an offer: a file that is not exactly the region
// the answer describes (offset 0, fstat size = length), or that is sparse
// (an engine's registered memory is allocated; mapping holes with
// MAP_POPULATE would allocate them here), is refused with StatusProtocol
// before anything is mapped, and a region that would take this plugin's
// mapped peer memory over max_mapped_bytes (default: the machine's RAM) is
// refused with StatusUnsupported and a warning that names the setting.
// It maps the region read-write for remote-read-write, read-only for
// remote-read (a write would fault: the kernel enforces the permission,
// and the plugin refuses such a write with StatusPermission before it
// tries), and caches the mapping per (peer, region).
//
// The accept loop survives errors: an accept that fails (EMFILE under a
// low open-files limit, ENFILE, ENOMEM) is retried after a pause that
// doubles up to 1s, with a warning at most every 10s. At most max_conns
// (default 1024) peer connections are served at once; one more is closed
// at once, with a rate-limited warning. If the listener itself is gone
// (closed under the plugin), Stats reports accepting=0 and the plugin
// binary exits, so that the host reports it restarting and starts a
// fresh one rather than an engine that says shm runs and serves nobody.
//
// Revocation. When the owner unregisters a region, its plugin pushes
// "revoke R, generation G" on every connection whose peer was sent R's fd,
// and UnregisterMemory waits until each has acknowledged, or its
// connection ended, for at most revoke_timeout (default 5s). A dialer that
// receives a revoke takes the mapping out of its table at once (new
// descriptors re-ask and get StatusNotRegistered), lets copies already
// running on it finish, skips queued chunks of split copies, unmaps, then
// acknowledges. The window, honestly: a copy that started before the
// revoke arrived may still write into the region until it ends; for a
// cooperating peer that ends before UnregisterMemory returns. A peer that
// does not acknowledge in time (hung, or malicious) loses its connection
// and UnregisterMemory returns anyway: the kernel cannot take a mapping
// away from another process, so such a peer keeps the pages (not the
// registration) until it exits: for a carved region a copy the host took
// at Unregister, no longer the application's memory; for a whole
// allocation, its memory until the application frees it. When a connection ends, the dialer drops every mapping it
// received on it after its copies in flight finish.
//
// Copies. A copy up to inline_max (1 MiB) runs in Submit itself (on the
// lane goroutine, tens of microseconds at most). Larger ones go to a pool
// of copy_workers goroutines (default runtime.NumCPU()), each with its own
// queue; from split_min (4 MiB) a copy is cut into page-aligned chunks of
// at least 1 MiB handed to consecutive workers, so a large transfer uses
// several cores when they are free. Stats reports chunks per worker.
// Low-priority copies above 64 KiB go to a second pool of as many
// workers whose threads run at niceness bulk_nice (default 10, 0 turns
// it off; sdk.LowerThread), so that on busy cores the kernel gives the
// high-priority lane's wakeups the CPU first (copies_bulk counts them).
//
// Statuses. Checked at Submit: unknown op or zero length -> StatusInvalid;
// deadline passed -> StatusTimeout (again before the copy); peer not
// opened -> StatusPeerUnknown; local region not registered ->
// StatusNotRegistered; local range outside it, or a remote offset+length
// that overflows -> StatusOutOfBounds. Then, against the peer's answer:
// StatusNotRegistered, StatusOutOfBounds, StatusPermission,
// StatusStaleIncarnation; the peer's socket unreachable or the connection
// lost -> StatusPeerUnreachable; an fd that cannot be mapped ->
// StatusProtocol. ClosePeer and Stop -> StatusShutdown. Every descriptor
// completes exactly once.
//
// Served traffic. The owner's plugin never sees a copy into or out of
// its memory, so each connection's dialer tallies what its copies moved
// and sends it (msgServed, with its engine name) at most every 100ms to
// an owner whose endpoint says "served": true; the owner counts it per
// dialer (kit.Served) as its served traffic, as the dialer reports it
// (served.go). An older owner is sent nothing.
//
// Restarts. A restarted plugin listens on a new socket; its engine
// publishes the new endpoint once the plugin has every registration back,
// and a peer engine re-opens the peer there, so transfers resume without
// ever reaching a plugin that does not know the regions yet.
// Meanwhile a peer's descriptors meet the old socket gone
// (StatusPeerUnreachable), chunks not started on a mapping dropped with
// the lost connection (StatusNotRegistered), or the peer closed and
// re-opened under them (StatusShutdown, StatusPeerUnknown): its host's
// failover takes each as the target changing (host/failover Classify)
// and tries again once the new descriptor has arrived.
//
// Limits. Both engines must share a network namespace (abstract sockets
// live there) and the machine id; engines in different namespaces fail
// with StatusPeerUnreachable and should use TCP.
package shm

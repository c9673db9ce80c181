// Package localmem owns this engine's local memory: the allocations
// (sealed memfd regions every plugin can map), the table of registered
// buffers with their region ids, and the fan-out of a registration to the
// plugins through the small Plugin interface. Memory the application
// allocated itself ("foreign", foreign.go) is registered without a memfd,
// only with plugins that take it (ForeignPlugin; for peers' use, one of
// them must serve it to peers, not LocalOnlyPlugin alone), pinned while registered,
// after the ptrace-scope check and grant of attach.go (AttachVerdict is
// pure; AttachEnv is the seam to the system). A region that peers may
// use reaches the plugins as a memfd of exactly its bytes: a page-aligned
// part of an allocation is carved into its own memfd at Register and put
// back at Unregister (carve.go), so that a plugin that passes fds to other
// processes (shm) never passes local-only or unregistered memory.
// RegisterBatch registers many buffers at once, all or nothing, carving
// as Register does, sorting the table once and making one call to each
// plugin that takes batches (BatchPlugin), to all of them at once; its
// ranges may be foreign too (foreign_batch.go).
//
// The table is copy-on-write: Lookup, on the submit path, reads it
// lock-free and allocates nothing. Writers (Register, Unregister, Replay)
// are serialised by the caller, which holds one lock across registration,
// open segments and plugin restarts so that a restarting plugin misses no
// registration; the package takes no lock of its own around them.
//
// It must not know about segments of other engines, the metastore or the
// request path, and it never decides which plugins are usable: the caller
// passes the ones to reach.
package localmem

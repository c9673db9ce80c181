// Package remotes owns this engine's view of other engines' segments: the
// table of open handles (one per life of a peer, read lock-free on the
// submit path), the fetch of a descriptor (from the metastore, or from the
// peer itself in peer-to-peer mode; or handed in by the application as a
// blob, Table.Import, which nothing watches), incarnations and retiring the handle
// of a peer that restarted, and following the metastore's watch so that a
// peer that re-registers, restarts or goes away changes the cached
// descriptor when the watch fires, not when a transfer fails (a
// transport whose endpoint moved, a restarted plugin of the peer, has its
// peer re-opened at the new one). With a
// cluster secret (a segment.Signer) a descriptor that is unsigned or
// badly signed is refused, by the fetch with an error naming the segment
// and the key and by the watch with a warning, and counted.
//
// Directory puts these together as the engine's API uses them: open,
// import and close a segment, follow the metastore, and look again at a
// peer a transfer failed on.
//
// What a watch event does to a handle is decided by Decide, a pure
// function of the cached descriptor and the event. Follow is the loop
// that applies it; its owner starts it and stops it by ending its
// context. Table writers are serialised by the caller, which holds one
// lock across open segments, registrations and plugin restarts.
//
// It must not build requests, choose transports for them or publish this
// engine's own descriptor; it reaches plugins only through the Transport
// interface (open and close a peer).
package remotes

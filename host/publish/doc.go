// Package publish owns this engine's presence in the metastore: building
// its descriptor, claiming its name (refusing to take over a live engine's,
// taking over a dead one's at once), writing the descriptor bound to a
// lease that the metastore keeps alive while the engine runs, and the
// metastore health the engine reports (MetastoreHealth).
//
// With a cluster secret (a segment.Signer) every descriptor it writes is
// signed, and a name held by an entry that is not validly signed is
// reclaimed. Its guard watches the engine's own key and logs, then
// repairs, a replacement or deletion by someone else.
//
// Publish returns once a write that carries the caller's change is made,
// and calls that arrive during a write share the next one (group commit):
// a burst of registrations writes a few times, not once each.
//
// An outage must never fail a Register: the lease keeps the newest value
// and writes it when the metastore answers again, and the health says so
// meanwhile. The Publisher owns the goroutines that watch its lease and
// its key, and stops them in Close.
//
// It must not read other engines' descriptors except to check a name it
// claims, nor know about plugins, buffers or requests beyond the
// descriptor it is handed.
package publish

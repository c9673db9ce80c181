// Package publish owns this engine's presence in the metastore: building
// its descriptor, claiming its name (refusing to take over a live engine's,
// taking over a dead one's at once), writing the descriptor bound to a
// lease that the metastore keeps alive while the engine runs, and the
// metastore health the engine reports (MetastoreHealth).
//
// An outage must never fail a Register: the lease keeps the newest value
// and writes it when the metastore answers again, and the health says so
// meanwhile. The Publisher owns the goroutine that watches its lease and
// stops it in Close.
//
// It must not read other engines' descriptors except to check a name it
// claims, nor know about plugins, buffers or requests beyond the
// descriptor it is handed.
package publish

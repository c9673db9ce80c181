// Package host is Ferry's embeddable core: an application creates an
// Engine, allocates and registers memory, opens remote segments by name
// (or imports a peer's ExportSegment blob, with no metastore) and submits
// reads and writes; the engine carries them out through transport
// plugins running as separate processes.
//
// The engine decides how bytes move (which plugin, how to slice); the
// application says what moves. Every task ends in exactly one terminal
// state: COMPLETED, FAILED, CANCELED, TIMEOUT or INVALID.
//
// # What ended means
//
// A task in a terminal state is one no plugin still touches: its buffer
// may be reused at once. A task canceled (Cancel, CancelTask, a Wait or
// Transfer whose context ended) or timed out while its plugin holds
// slices of it stays PENDING until every slice is back or the plugin is
// gone. A plugin that implements sdk.Aborter is asked to give them back
// early: queued slices never leave, and a read in flight stops writing
// local memory. One that does not is waited for, and a plugin that holds
// an ended task's slices for supervise.end_grace is killed and restarted,
// which frees them. So Wait, Transfer and FreeBatch return within the
// deadline, end_grace and a kill, and never report a terminal state
// early.
//
// Before its end, a read may have written part of its local range; a
// write reported TIMEOUT or CANCELED may have partly or wholly landed at
// the peer (slices already on the wire are not called back, and where its
// plugin was killed the peer may still apply bytes it had received):
// treat the remote range as undefined.
package host

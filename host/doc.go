// Package host is Ferry's embeddable core: an application creates an
// Engine, allocates and registers memory, opens remote segments by name
// (or imports a peer's ExportSegment blob, with no metastore) and submits
// reads and writes; the engine carries them out through transport
// plugins running as separate processes.
//
// The engine decides how bytes move (which plugin, how to slice); the
// application says what moves. Every task ends in exactly one terminal
// state: COMPLETED, FAILED, CANCELED, TIMEOUT or INVALID.
package host

// Package segment owns the segment descriptor: what an engine publishes
// about itself (name, incarnation, machine id, registered buffers,
// per-transport endpoints, topology, rails), its JSON encoding (a buffer
// list of more than PackAbove buffers is packed into a string, under
// schema 2: about 7 bytes a buffer instead of 100; see BufferList) and the
// checks on decoding one from outside, and the translation of an address
// range of a remote segment into a (region, offset) pair with bounds and
// permission checks. With a cluster secret, Signer signs the descriptor
// (HMAC-SHA256 over the JSON as written, the name and the incarnation) and
// refuses one that is unsigned, badly signed or copied to another name.
// A descriptor from outside is capped in size, buffer count, and every
// string, list and blob its writer chooses (limits.go). A blob
// (EncodeBlob, DecodeBlob) frames a descriptor for an application's own
// side channel: magic, version, length and a sha256 checksum around the
// (signed) JSON.
//
// It is plain data: no I/O, no plugins, no metastore calls. Lookups on the
// transfer path allocate nothing. The local buffers live in host/localmem,
// the cache of remote descriptors in host/remotes, publication in
// host/publish.
package segment

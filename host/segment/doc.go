// Package segment owns segment descriptors: the local segment's (name,
// incarnation, machine id, registered buffers, per-transport endpoints) and
// a cache of remote ones, and the translation of an address range into a
// (region, offset) pair with bounds and permission checks.
//
// It is plain data: no I/O, no plugins, no metastore calls. Lookups on the
// transfer path allocate nothing.
package segment

// Package memcpy is the data path's copy between two mappings: the one
// routine a same-machine transport (plugins/shm) and its baseline in
// `ferry bench` move payload bytes with.
//
// It exists because Go's copy (runtime.memmove) on amd64 switches to
// non-temporal stores for every copy of 1 MiB or more on its AVX path
// (runtime/memmove_amd64.s: CMPQ BX, $0x100000; JAE gobble_big_data_fwd),
// whatever the cache size. The AVX path is what AMD CPUs always take, and
// what Intel CPUs with ERMS and FSRM take when the destination is not
// 16-byte aligned. A non-temporal store sends the destination to memory
// and evicts it from the cache, so a 1 MiB copy that fits the last-level
// cache many times over runs slower than one of 1 MiB - 1 byte, and the
// reader of the destination (the peer process, a moment later) misses.
//
// Copy keeps copies that fit the last-level cache in it: from 1 MiB up to
// CachedMax it copies in pieces just under 1 MiB, each of which memmove
// copies with ordinary stores. CachedMax is half the last-level cache
// (sysfs), at most 32 MiB. Below 1 MiB, above CachedMax, on other
// architectures, and where the two ranges overlap, it is copy itself:
// a copy larger than the cache gains nothing from the cache and keeps
// memmove's non-temporal stores.
//
// It owns no state beyond the cache size, read once from sysfs. It must
// not start goroutines: splitting a copy over workers is the transport's
// business (Piece is what each worker calls).
package memcpy

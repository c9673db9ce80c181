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
// On a CPU whose REP MOVSB is the fast kind (it reports ERMS and FSRM,
// as recent Intel and AMD server CPUs do), a copy that stays in the
// cache is one REP MOVSB instead, from 32 KiB up to CachedMax (ranges
// that do not overlap): memmove's AVX loop, which
// AMD CPUs always take, was slower from 24 KiB on. On a 2-vCPU AMD EPYC
// (Zen 5) guest, BenchmarkInterleaved (3 runs, 2026-12-06), GB/s for
// memmove / Copy before / REP MOVSB / glibc's memcpy, destination
// aligned: 32 KiB 81 / 79 / 136 / -, 64 KiB 76 / 77 / 104 / 97, 512 KiB
// 70 / 74 / 84-90 / 80-87, 1 MiB 38 / 45 / 55-58 / 45-48, 2 MiB 37 / 43
// / 54 / 44; with the destination one byte off, within a few percent of
// memmove (48 KiB: 74 against 77) or well ahead (256 KiB: 94-104 against
// 76-85); at 4 KiB memmove was ahead (118-130 against 118-122), and from
// 32 MiB, past CachedMax, the four were within each other's spread. What
// a REP MOVSB copy wrote stays in the cache: a copy followed by a read of
// the destination ran 36 GB/s at 1 MiB against 31 for Copy before it and
// 19 for memmove. The shm plugin's 1 MiB writes one at a time went from
// 35.7-37.9 to 40.5-43.7 GB/s (`ferry bench --transport shm --size 1MiB`,
// 4 interleaved rounds), its 64 KiB writes from 14.8-17.9 to 18.0-18.4.
//
// It owns no state beyond the cache size, read once from sysfs. It must
// not start goroutines: splitting a copy over workers is the transport's
// business (Piece is what each worker calls).
package memcpy

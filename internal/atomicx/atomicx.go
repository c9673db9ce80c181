// Package atomicx holds the memory-ordering operations sync/atomic does
// not offer: a store with release ordering only, and a full barrier
// alone. sync/atomic's stores are sequentially consistent, which on
// amd64 is an XCHG, a full barrier each: a publisher that stores several
// words in a row and needs them ordered before one later load pays it
// once with these, not once a word.
//
// Under the race detector, which cannot see assembly's memory accesses
// or the ordering they give, the stores are sync/atomic's and Fence an
// atomic add, so that the detector sees the synchronisation they are.
package atomicx

// Command capi is libferry.so, Ferry's C ABI: built with
// `go build -buildmode=c-shared -o bin/libferry.so ./capi` (make build),
// and declared by the hand-written include/ferry.h, which is the contract
// (this package's exports follow it, never the other way round).
//
// It owns the translation at the boundary only: integer handles for
// engines, batches and block lists (C never holds a Go pointer), C
// structs in and out, the error code of every call with its thread-local
// message, and the recover that keeps a Go panic from crossing into C.
// The public functions are defined in ferry.c, each a thin wrapper over
// an export of this package (ferry_go_*), so that the C compiler checks
// them against the header. It must not hold transfer logic of its own:
// every operation is one call of package host's public API. See
// docs/c-api.md.
package main

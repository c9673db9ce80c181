// Package blocks owns prepared block lists: a layout of fixed-size blocks
// (count, stride, optionally layers × blocks, as a KV cache is laid out),
// fitted once on each side of a transfer, and the cutting of a
// submission's (local index, remote index) pairs into runs: blocks that
// are contiguous on both sides, in one region on each side, merge into
// one run (request merging).
//
// Bounds are checked once, when a layout is fitted (Fit asks the caller
// where each layer lies: the local registry, the remote descriptor), and
// per index only against the layout's block count (List.Check).
//
// The package is pure: plain numbers in, plain numbers out. It must not
// read clocks, look up registries itself, touch rings or plugins, or
// allocate per index; the engine (host/blocks.go) hands it the facts and
// turns each run into one task.
package blocks

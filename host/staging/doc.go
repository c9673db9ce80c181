// Package staging moves a request whose memory no transport reaches
// directly (GPU memory at either end, tcp between the hosts) through
// pinned host memory, as one request: device → host slot on the sender,
// the network between slots, host slot → device on the receiver
// (TENT's "Remote Stage"; DESIGN.md section 4, Staging).
//
// It owns three things:
//   - Pool: a bounded set of equal slots carved from host memory that
//     every transport and the device plugin have registered. Get waits
//     within the caller's deadline for a free slot; an exhausted pool is a
//     wait, then ErrPoolExhausted.
//   - Run: the pipeline. A request is cut into slices; each slice goes
//     through the hops (functions handed in) in order, and different
//     slices are in different hops at once, so the copy of slice k+1
//     overlaps the send of slice k. The first failure stops it and is
//     returned naming its hop; every goroutine Run starts has exited, and
//     every slot it took is back, before it returns.
//   - Server: the receiving engine's half (reserve a slot, land it into
//     device memory, fetch device memory into a slot, release), which
//     host/control carries between engines.
//
// It knows nothing of plugins, batches or the wire: the request path
// (host/path) hands in the hops as closures over its device plugin and
// its own Submit, and host/control the Server's calls.
package staging

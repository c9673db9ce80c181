// Package fault is ferry-plugin-fault, a fault-injection plugin for tests;
// never configure it in production. It runs Ferry's real TCP transport
// in-process (package tcp: same wire protocol, same endpoint blob) and, as
// its configuration says, lets chosen descriptors go wrong in one of nine
// ways, so that the host's supervision, failover, deadlines and retries can
// be tested against a plugin that misbehaves on purpose:
//
//   - drop: the descriptor is not sent; it completes with a failure status
//     (StatusIO, or StatusPeerUnreachable), 0 bytes.
//   - delay: the descriptor runs normally; its completion is held back for
//     a fixed duration.
//   - corrupt: corrupts and reports. A read runs normally, then one byte of
//     its local destination is flipped and it completes StatusIO, so the
//     host must not trust the bytes and must retry. A write (whose
//     destination is the peer's memory, out of reach) is sent and then
//     reported StatusIO. Both count in the `corrupted` counter.
//   - stall: from the first chosen descriptor on, the plugin completes
//     nothing and stops draining its submission ring (the lane goroutine
//     blocks in Submit), while its control plane keeps answering. A
//     stalled plugin never answers Stop either: the host must notice the
//     lack of progress, time out and kill it.
//   - crash: at the first chosen descriptor the process exits with status
//     3, with earlier descriptors still in flight.
//   - hold: the descriptor waits `delay` before TCP carries it: a slow
//     path, whose memory is touched late. The plugin implements
//     sdk.Aborter: Abort takes a held descriptor back (it completes
//     StatusCanceled, never carried), unless the block says
//     `abort = false` (a transport that cannot), and passes the tokens on
//     to TCP.
//
// Three more break the completion contract: the descriptor runs
// normally, and its completion is told wrong, for the host to catch.
//
//   - flip: the completion's token has bit `bit` (0..63, required)
//     flipped; the real token is never completed.
//   - duplicate: the completion is delivered twice.
//   - overreport: the completion reports `extra` (default 1) bytes more
//     than the descriptor carried.
//
// And one breaks the lane itself: break_ring writes a tail no ring can
// have into the header of every completion ring the process holds, and
// leaves the descriptor uncompleted; the host must find the ring corrupt,
// stop reaping it and kill the run, not spin on it.
//
// Configuration. The plugin's `config { ... }` body holds zero or more
// `fault "KIND" { ... }` blocks and at most one `tcp { ... }` block, whose
// body is handed verbatim to the TCP transport (see package tcp for its
// attributes; diagnostics still point into the operator's file):
//
//	config {
//	  fault "drop" {
//	    after  = 2                   # descriptors let through before the fault starts; default 0
//	    every  = 3                   # then every Kth descriptor; default 1 (each)
//	    rate   = 0.5                 # and of those, this fraction, in (0, 1]; default 1
//	    seed   = 7                   # seed of the rate's choice; default 1
//	    status = "peer_unreachable"  # drop only: "io" (default) or "peer_unreachable"
//	    rail   = 1                   # only descriptors sent on this rail; default any
//	  }
//	  fault "delay" {
//	    delay = "200ms"              # delay only, required: how long each chosen completion is held
//	  }
//	  fault "hold" {
//	    delay = "300ms"              # hold only, required: how long each chosen descriptor waits
//	    abort = false                # hold only: Abort leaves held descriptors alone; default true
//	  }
//	  fault "corrupt" {}
//	  fault "stall" { after = 1000 }
//	  fault "crash" { after = 1000 }
//	  fault "flip" { bit = 40 }      # flip only, required: 0..63
//	  fault "duplicate" {}
//	  fault "overreport" { extra = 4096 }  # overreport only; default 1
//	  tcp {
//	    listen = ["127.0.0.1:0"]
//	  }
//	}
//
// Descriptors are numbered from 0 in the order Submit sees them (OpNop
// descriptors never reach Submit: the SDK completes them). Descriptor i is
// chosen by a fault block when i >= after, (i-after) % every == 0, and a
// hash of (seed, i) falls under rate: the same configuration chooses the
// same descriptors in every run. When several blocks choose one
// descriptor, crash wins over stall, stall over drop, drop over corrupt;
// delay combines with any of drop and corrupt; hold delays whatever else
// chose the descriptor. Flip, duplicate and
// overreport alter whatever completion the descriptor gets (a drop's or a
// corrupt's too) and combine with each other and with delay. Each kind
// may appear once.
// With no fault block the plugin is the TCP transport under another name,
// and passes the SDK's conformance suite.
//
// Stats: the TCP transport's counters plus `descriptors` (seen by Submit),
// `dropped`, `delayed`, `corrupted`, `stalled` (descriptors held by a
// stall: blocked in Submit or completion withheld), `flipped`,
// `duplicated`, `overreported`, `held`, `held_done` (held descriptors
// whose completion was delivered, carried or aborted) and `held_aborted`
// and, when a crash fault
// is configured, `crashed_after` (its `after`: the process exits when it
// is given descriptor number crashed_after).
//
// It must not be a place to hide bugs of its own: every descriptor it lets
// through completes exactly once, as the TCP transport completed it
// (except as a flip, duplicate or overreport fault says), and it never
// touches memory outside a registered region.
package fault

package tcp

import (
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Priority connections. A descriptor whose Prio is high goes on a slot of
// its own, one per peer and local rail, beside the rail's
// connections_per_peer bulk slots: a 4 KiB high-priority read does not
// wait in a bulk slot's queue, nor on its socket, behind megabytes of
// lower-priority frames, and on the peer it is served by that
// connection's own goroutine instead of after the bulk frames ahead of it
// on a shared connection. The slot is a slot like the others (the same
// writer, reader, dial plan, hello and authentication); its connection is
// dialed when the first high-priority descriptor reaches it, so a peer
// that never sees one never gets the extra connection. On the listener it
// is one more authenticated connection of the peer, counted in
// max_connections and max_connections_per_peer like the rest.
//
// This follows what a transport may do with Prio (sdk/ring.Descriptor):
// nothing is dropped, delayed or reordered within a class; every
// descriptor of one request carries the same Prio, so a request's slices
// stay on one slot, in the order the engine put them. Normal and low
// priority share the bulk slots as before. priority_connection = false
// sends every descriptor to the bulk slots.

// addPrioritySlots appends one high-priority slot per local rail to
// p.slots (after the bulk slots), sharing its rail's dial plan.
func (p *peer) addPrioritySlots(rails []*rail) {
	for _, rl := range rails {
		plan := p.slots[rl.idx*p.conns].plan
		p.slots = append(p.slots, &slot{t: p.t, p: p, rail: rl, plan: plan, wake: make(chan struct{}, 1)})
	}
}

// slotFor chooses the slot for d, whose rail was checked: rail d.Rail's
// high-priority slot for a high-priority descriptor (when the peer has
// them), else the least loaded of the rail's bulk slots.
func (p *peer) slotFor(d *ring.Descriptor) *slot {
	r := int(d.Rail)
	if p.prio && d.Prio == uint8(sdk.PriorityHigh) {
		p.t.stats.opsPriority.Add(1)
		return p.slots[p.nrails*p.conns+r]
	}
	return p.pick(r)
}

package host

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host/segment"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// SegmentID names an open remote segment in requests.
type SegmentID uint32

// remote is an open remote segment.
type remote struct {
	id   SegmentID
	name string
	desc *segment.Descriptor
	// opened[i] is true when plugin i has the peer open.
	opened []bool
	// route is the index into e.plugins of the default transport, -1 if
	// none reaches the segment.
	route int
	why   string // why route is -1
	// retired says why this handle no longer reaches its segment (the
	// peer restarted); requests on it are refused before anything is
	// sent, so its new life never receives them.
	retired string
}

// Segment is what OpenSegment learned about a remote segment.
type Segment struct {
	ID          SegmentID
	Name        string
	Incarnation uint64
	MachineID   string
	Buffers     []segment.Buffer
	Transports  []string // transports both ends have
	// Topology is the peer machine's NUMA nodes and NICs, nil when it
	// published none; Rails, each of its transports' rails.
	Topology *segment.Topology
	Rails    map[string][]segment.RailInfo
}

// OpenSegment fetches the named segment's descriptor and prepares every
// transport both engines have to reach it.
//
// name is a segment name published in the metastore, or, in peer-to-peer
// mode (no metastore, kind "none", or none that knows name), the host:port
// of the peer's control service (Engine.ControlAddr); the segment is then
// known by the engine name its descriptor carries (Segment.Name).
func (e *Engine) OpenSegment(ctx context.Context, name string) (Segment, error) {
	if e.closed.Load() {
		return Segment{}, ErrClosed
	}
	// From the metastore, or from the peer's control service when name
	// is its host:port (peer-to-peer mode); see fetchDescriptor.
	d, name, err := e.fetchDescriptor(ctx, name)
	if err != nil {
		return Segment{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	cur := *e.remotes.Load()
	for _, r := range cur {
		if r == nil || r.name != name || r.retired != "" {
			continue
		}
		// Already open: refresh the buffers (they may have grown) if
		// it is the same life of the peer.
		if r.desc.Incarnation == d.Incarnation {
			r2 := *r
			r2.desc = d
			next := slices.Clone(cur)
			next[r.id-1] = &r2
			e.remotes.Store(&next)
			return r2.info(e), nil
		}
		// The peer restarted: its old handle stays bound to the old
		// life (a request through it is refused, never applied to the
		// new one) and the new life gets a handle of its own below.
		e.retireLocked(ctx, r, d.Incarnation)
		cur = *e.remotes.Load()
	}
	r := &remote{id: SegmentID(len(cur) + 1), name: name, desc: d, opened: make([]bool, len(e.plugins)), route: -1}
	if i := slices.Index(cur, nil); i >= 0 {
		r.id = SegmentID(i + 1)
	}
	var reasons []string
	for i, ps := range e.plugins {
		ep, ok := d.Transports[ps.name]
		switch {
		case !ps.usable():
			reasons = append(reasons, fmt.Sprintf("%s: not running here", ps.name))
			continue
		case !ok:
			reasons = append(reasons, fmt.Sprintf("%s: %q does not offer it", ps.name, name))
			continue
		case ps.proc().Info.SameMachineOnly && d.MachineID != e.machineID:
			reasons = append(reasons, fmt.Sprintf("%s: same machine only, %q is on %q", ps.name, name, d.MachineID))
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, controlTimeout)
		err := ps.proc().Client.OpenPeer(cctx, sdk.Peer{ID: uint32(r.id), Segment: name, Incarnation: d.Incarnation, MachineID: d.MachineID, Endpoint: ep})
		cancel()
		if err != nil {
			reasons = append(reasons, fmt.Sprintf("%s: %v", ps.name, err))
			continue
		}
		r.opened[i] = true
		// Without a policy: on the same machine a same-machine transport
		// (shm) wins, else the first configured transport that opened.
		if r.route < 0 || (ps.proc().Info.SameMachineOnly && !e.plugins[r.route].proc().Info.SameMachineOnly) {
			r.route = i
		}
	}
	if r.route < 0 {
		return Segment{}, fmt.Errorf("%w: open segment %q: no transport reaches it (%v)", ErrTransportUnavailable, name, reasons)
	}
	next := slices.Clone(cur)
	if int(r.id) <= len(next) {
		next[r.id-1] = r
	} else {
		next = append(next, r)
	}
	e.remotes.Store(&next)
	return r.info(e), nil
}

// retireLocked marks r as a handle to a previous life of its peer, now
// at incarnation inc, and closes it in the plugins; e.mu held.
func (e *Engine) retireLocked(ctx context.Context, r *remote, inc uint64) {
	cur := *e.remotes.Load()
	if int(r.id) > len(cur) {
		return
	}
	// r may be an older copy; the slot may have been closed or reused.
	r = cur[r.id-1]
	if r == nil || r.retired != "" || r.desc.Incarnation == inc {
		return
	}
	r2 := *r
	r2.retired = fmt.Sprintf("segment %q restarted (now incarnation %#x; handle %d is bound to %#x): open it again for a new handle", r.name, inc, r.id, r.desc.Incarnation)
	r2.opened = make([]bool, len(r.opened))
	next := slices.Clone(cur)
	next[r.id-1] = &r2
	e.remotes.Store(&next)
	for i, ok := range r.opened {
		if ok && e.plugins[i].usable() {
			cctx, cancel := context.WithTimeout(ctx, controlTimeout)
			e.plugins[i].proc().Client.ClosePeer(cctx, uint32(r.id))
			cancel()
		}
	}
}

func (r *remote) info(e *Engine) Segment {
	s := Segment{ID: r.id, Name: r.name, Incarnation: r.desc.Incarnation, MachineID: r.desc.MachineID, Buffers: r.desc.Buffers,
		Topology: r.desc.Topology, Rails: r.desc.Rails}
	for i, ok := range r.opened {
		if ok {
			s.Transports = append(s.Transports, e.plugins[i].name)
		}
	}
	return s
}

// CloseSegment forgets an open segment; its peers are closed in every
// plugin.
func (e *Engine) CloseSegment(ctx context.Context, id SegmentID) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	cur := *e.remotes.Load()
	if id == 0 || int(id) > len(cur) || cur[id-1] == nil {
		return fmt.Errorf("%w: close segment %d: not open", ErrSegmentNotFound, id)
	}
	r := cur[id-1]
	next := slices.Clone(cur)
	next[id-1] = nil
	e.remotes.Store(&next)
	for i, ok := range r.opened {
		if ok && e.plugins[i].usable() {
			cctx, cancel := context.WithTimeout(ctx, controlTimeout)
			e.plugins[i].proc().Client.ClosePeer(cctx, uint32(id))
			cancel()
		}
	}
	return nil
}

func (e *Engine) remote(id SegmentID) *remote {
	cur := *e.remotes.Load()
	if id == 0 || int(id) > len(cur) {
		return nil
	}
	return cur[id-1]
}

// recheckTimeout bounds the one descriptor fetch after a peer failed a
// task, so that a slow metastore cannot hold up the failed Transfer.
const recheckTimeout = 2 * time.Second

// recheck runs when a plugin failed a task because its peer was
// unreachable or refused it as addressed to a previous incarnation: the
// descriptor is fetched again, once per segment and Transfer (checked),
// to tell the caller whether the peer is gone or restarted. A restarted
// peer's handle is retired (see retireLocked), so that OpenSegment gives
// a handle to its new life; the failed task stays failed, since a write
// addressed to a previous incarnation is never applied to the next.
func (e *Engine) recheck(ctx context.Context, rem *remote, st ring.Status, err error, checked map[SegmentID]string) error {
	switch st {
	case ring.StatusStaleIncarnation, ring.StatusPeerUnreachable, ring.StatusPeerUnknown:
	default:
		return err
	}
	note, ok := checked[rem.id]
	if !ok {
		note = e.fetchAgain(ctx, rem)
		checked[rem.id] = note
	}
	if note == "" {
		return err
	}
	return fmt.Errorf("%w; %s", err, note)
}

func (e *Engine) fetchAgain(ctx context.Context, rem *remote) string {
	name := rem.name
	if e.cfg.Metastore.Kind == config.MetastoreNone {
		name = rem.desc.Control // peer-to-peer: ask the peer itself
	}
	if name == "" {
		return ""
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recheckTimeout)
	defer cancel()
	d, _, err := e.fetchDescriptor(cctx, name)
	switch {
	case err != nil:
		return fmt.Sprintf("the peer looks down (re-reading its descriptor: %v)", err)
	case d.Incarnation != rem.desc.Incarnation:
		e.mu.Lock()
		e.retireLocked(ctx, rem, d.Incarnation)
		e.mu.Unlock()
		return fmt.Sprintf("segment %q restarted (now incarnation %#x, this handle is bound to %#x): open it again", rem.name, d.Incarnation, rem.desc.Incarnation)
	}
	return ""
}

package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ferrydev/ferry/host/metastore"
	"github.com/ferrydev/ferry/host/publish"
	"github.com/ferrydev/ferry/host/remotes"
	"github.com/ferrydev/ferry/host/segment"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// remote is an open remote segment, as the request path reads it.
type remote = remotes.Handle

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

// remotesErr puts an error of package remotes under the public sentinel
// of the same meaning; its text is unchanged.
func remotesErr(err error) error {
	switch {
	case errors.Is(err, remotes.ErrNotFound):
		return asKind(ErrSegmentNotFound, err)
	case errors.Is(err, remotes.ErrUnreachable):
		return asKind(ErrTransportUnavailable, err)
	}
	return err
}

// OpenSegment fetches the named segment's descriptor and prepares every
// transport both engines have to reach it.
//
// name is a segment name published in the metastore, or, in peer-to-peer
// mode (no metastore, kind "none", or none that knows name), the host:port
// of the peer's control service (Engine.ControlAddr); the segment is then
// known by the engine name its descriptor carries (Segment.Name).
//
// Where the metastore has watches (every kind but "none"), an open
// segment follows its peer: new registrations are seen without opening
// it again, and the handle of a peer that restarted is retired as soon
// as the metastore shows the new life.
func (e *Engine) OpenSegment(ctx context.Context, name string) (Segment, error) {
	if e.x.Closed() {
		return Segment{}, ErrClosed
	}
	asked := name
	for try := 1; ; try++ {
		seen := e.seen(segment.Key(e.keyPrefix, asked))
		d, name, key, err := e.fetch.Fetch(ctx, asked)
		if err != nil {
			return Segment{}, remotesErr(err)
		}
		e.mu.Lock()
		h, err := e.segs.Open(ctx, name, key, d, e.peerPorts())
		// A change the watch reported while the descriptor was read
		// found no handle to apply to: read it again, so that the
		// handle is not left on a life the peer has left.
		again := err == nil && key != "" && e.follow != nil && e.follow.Seen(key) != seen && try < openTries
		e.mu.Unlock()
		if err != nil {
			return Segment{}, remotesErr(err)
		}
		if !again {
			return e.segmentInfo(h), nil
		}
	}
}

// openTries bounds how often OpenSegment reads a descriptor that keeps
// changing while it is read; the last read's handle is returned.
const openTries = 3

// seen is e.follow.Seen(key), 0 without a watch.
func (e *Engine) seen(key string) uint64 {
	if e.follow == nil {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.follow.Seen(key)
}

func (e *Engine) segmentInfo(h *remote) Segment {
	s := Segment{ID: SegmentID(h.ID), Name: h.Name, Incarnation: h.Desc.Incarnation, MachineID: h.Desc.MachineID, Buffers: h.Desc.Buffers,
		Topology: h.Desc.Topology, Rails: h.Desc.Rails}
	for i, ok := range h.Opened {
		if ok {
			s.Transports = append(s.Transports, e.x.Plugins()[i].Name())
		}
	}
	return s
}

// CloseSegment forgets an open segment; its peers are closed in every
// plugin.
func (e *Engine) CloseSegment(ctx context.Context, id SegmentID) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return remotesErr(e.segs.Close(ctx, uint32(id), e.peerPorts()))
}

// remote returns the open segment id, nil when none; lock-free.
func (e *Engine) remote(id SegmentID) *remote { return e.segs.Get(uint32(id)) }

// peerPorts returns every plugin, in order, as the remote-segment table
// sees it; e.mu held, so that a restart (which replays peers under e.mu)
// misses no open.
func (e *Engine) peerPorts() []remotes.Transport {
	ps := e.x.Plugins()
	out := make([]remotes.Transport, len(ps))
	for i, p := range ps {
		out[i] = peerPort{pluginPort: portOf(p), usable: p.Usable()}
	}
	return out
}

// peerPort is a plugin's run as the remote-segment table sees it.
type peerPort struct {
	pluginPort
	usable bool
}

func (p peerPort) Usable() bool          { return p.usable }
func (p peerPort) SameMachineOnly() bool { return p.p.Info.SameMachineOnly }

func (p peerPort) OpenPeer(ctx context.Context, peer sdk.Peer) error {
	return p.p.Client.OpenPeer(ctx, peer)
}

func (p peerPort) ClosePeer(ctx context.Context, id uint32) error {
	return p.p.Client.ClosePeer(ctx, id)
}

// recheckTimeout bounds the one descriptor fetch after a peer failed a
// task, so that a slow metastore cannot hold up the failed Transfer.
const recheckTimeout = 2 * time.Second

// recheck runs when a plugin failed a task because its peer was
// unreachable or refused it as addressed to a previous incarnation: the
// descriptor is fetched again, once per segment and Transfer (checked),
// to tell the caller whether the peer is gone or restarted. A restarted
// peer's handle is retired (see remotes.Table.Retire), so that
// OpenSegment gives a handle to its new life; the failed task stays
// failed, since a write addressed to a previous incarnation is never
// applied to the next. Where the metastore's watch got there first, the
// handle is retired already and the fetch finds the same.
func (e *Engine) recheck(ctx context.Context, rem *remote, st ring.Status, err error, checked map[SegmentID]string) error {
	switch st {
	case ring.StatusStaleIncarnation, ring.StatusPeerUnreachable, ring.StatusPeerUnknown:
	default:
		return err
	}
	id := SegmentID(rem.ID)
	note, ok := checked[id]
	if !ok {
		note = e.fetchAgain(ctx, rem)
		checked[id] = note
	}
	if note == "" {
		return err
	}
	return fmt.Errorf("%w; %s", err, note)
}

func (e *Engine) fetchAgain(ctx context.Context, rem *remote) string {
	name := rem.Name
	if e.fetch.Store == nil {
		name = rem.Desc.Control // peer-to-peer: ask the peer itself
	}
	if name == "" {
		return ""
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recheckTimeout)
	defer cancel()
	d, _, _, err := e.fetch.Fetch(cctx, name)
	switch {
	case err != nil:
		return fmt.Sprintf("the peer looks down (re-reading its descriptor: %v)", err)
	case e.staleDescriptor(d):
		// An earlier publication replayed in the metastore: it says
		// nothing of the peer now, and must not retire its handle.
		return fmt.Sprintf("the peer looks down (the metastore holds an older descriptor of %q than this engine has seen, seq %d: replayed by a writer of the metastore; its engine writes the newest back)", d.Name, d.Seq)
	case d.Name != rem.Name:
		// Another engine answers where this one's control service was
		// (its port reused, or an unspecified listen address such as
		// 0.0.0.0 published): nothing is learnt about this peer.
		return fmt.Sprintf("the peer looks down (its control address %s now answers for engine %q)", name, d.Name)
	case d.Incarnation != rem.Desc.Incarnation:
		e.mu.Lock()
		e.segs.Retire(ctx, rem.ID, d.Incarnation, e.peerPorts())
		e.mu.Unlock()
		return fmt.Sprintf("segment %q restarted (now incarnation %#x, this handle is bound to %#x): open it again", rem.Name, d.Incarnation, rem.Desc.Incarnation)
	}
	return ""
}

// staleDescriptor reports whether d, read from the metastore, is older
// than the newest descriptor of its name this engine has seen.
func (e *Engine) staleDescriptor(d *segment.Descriptor) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.segs.Stale(d.Name, d)
}

// peerDescriptor fetches the descriptor the control service at addr
// serves: peer-to-peer mode.
func (e *Engine) peerDescriptor(ctx context.Context, addr string) ([]byte, error) {
	c, err := e.hc.Client(addr)
	if err != nil {
		return nil, err
	}
	return c.Descriptor(ctx)
}

// watchSegments subscribes to the metastore's segment descriptors, so
// that open segments follow their peers (see remotes.Follower). Without
// a metastore (kind "none") nothing is watched and a change is learnt
// when a transfer fails, as in peer-to-peer mode. The watch is retried
// with backoff for the engine's life (metastore.Rewatch): until it runs,
// open segments learn of a peer's restart when a transfer to it fails,
// and MetastoreWatches says so.
func (e *Engine) watchSegments() {
	if e.fetch.Store == nil {
		return
	}
	wctx, cancel := context.WithCancel(context.Background())
	prefix := segment.Key(e.keyPrefix, "")
	rw := &metastore.Rewatch{Name: "segments", Prefix: prefix, W: e.meta, OnError: func(err error) {
		e.log.Warn("metastore watch failed; retrying. Meanwhile open segments learn of a peer's restart when a transfer to it fails", "prefix", prefix, "error", err)
	}}
	e.unwatch = cancel
	e.segWatch = rw
	f := &remotes.Follower{Table: e.segs, Store: e.meta, Lock: &e.mu, Transports: e.peerPorts, Log: e.log, Timeout: controlTimeout, Signer: e.signer}
	e.follow = f
	e.wg.Add(2)
	go func() {
		defer e.wg.Done()
		rw.Run(wctx)
	}()
	go func() {
		defer e.wg.Done()
		f.Run(wctx, rw.Events())
	}()
}

// metastoreWatches returns the state of the engine's metastore watches:
// the segments it follows (segs, nil without a metastore), and its own
// descriptor's guard.
func metastoreWatches(segs *metastore.Rewatch, pub *publish.Publisher) []metastore.WatchState {
	var out []metastore.WatchState
	if segs != nil {
		out = append(out, segs.State())
	}
	if pub != nil {
		if s, ok := pub.GuardWatch(); ok {
			out = append(out, s)
		}
	}
	return out
}

package host

import (
	"context"
	"errors"
	"fmt"

	"github.com/ferrydev/ferry/host/metastore"
	"github.com/ferrydev/ferry/host/path"
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
	h, err := e.dir.Open(ctx, name)
	if err != nil {
		return Segment{}, remotesErr(err)
	}
	return segmentOf(h, e.x.Plugins()), nil
}

// segmentOf is h as the engine's plugins ps reach it.
func segmentOf(h *remote, ps []*path.Plugin) Segment {
	return Segment{ID: SegmentID(h.ID), Name: h.Name, Incarnation: h.Desc.Incarnation, MachineID: h.Desc.MachineID, Buffers: h.Desc.Buffers,
		Topology: h.Desc.Topology, Rails: h.Desc.Rails, Transports: openIn(h, ps)}
}

// CloseSegment forgets an open segment; its peers are closed in every
// plugin.
func (e *Engine) CloseSegment(ctx context.Context, id SegmentID) error {
	return remotesErr(e.dir.Close(ctx, uint32(id)))
}

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

// recheck runs when a plugin failed a task because its peer was
// unreachable or refused it as addressed to a previous incarnation: the
// descriptor is fetched again (remotes.Directory.Recheck), once per
// segment and Transfer (checked), to tell the caller whether the peer is
// gone or restarted. The failed task stays failed, since a write
// addressed to a previous incarnation is never applied to the next.
func recheck(ctx context.Context, dir *remotes.Directory, rem *remote, st ring.Status, err error, checked map[SegmentID]string) error {
	switch st {
	case ring.StatusStaleIncarnation, ring.StatusPeerUnreachable, ring.StatusPeerUnknown:
	default:
		return err
	}
	id := SegmentID(rem.ID)
	note, ok := checked[id]
	if !ok {
		note = dir.Recheck(ctx, rem)
		checked[id] = note
	}
	if note == "" {
		return err
	}
	return fmt.Errorf("%w; %s", err, note)
}

// metastoreWatches returns the state of the engine's metastore watches:
// the segments it follows (none without a metastore), and its own
// descriptor's guard.
func metastoreWatches(dir *remotes.Directory, pub *publish.Publisher) []metastore.WatchState {
	var out []metastore.WatchState
	if s, ok := dir.WatchState(); ok {
		out = append(out, s)
	}
	if pub != nil {
		if s, ok := pub.GuardWatch(); ok {
			out = append(out, s)
		}
	}
	return out
}

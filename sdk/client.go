package sdk

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/status"

	transportv1 "github.com/ferrydev/ferry/sdk/proto/transport/v1"
	"github.com/ferrydev/ferry/sdk/shm"
)

// TransportClient is the host's handle on a transport plugin's control
// plane. go-plugin's Dispense returns one; the host then hands it the fd
// socket with SetFDSender before registering memory or attaching lanes.
type TransportClient struct {
	rpc        transportv1.TransportClient
	fds        *shm.FDSender
	nextAttach atomic.Uint64
}

// SetFDSender gives the client the host end of the fd socket.
func (c *TransportClient) SetFDSender(s *shm.FDSender) { c.fds = s }

// rpcErr strips gRPC's framing from a plugin's error so that the host can
// wrap it with the plugin's name.
func rpcErr(err error) error {
	if err == nil {
		return nil
	}
	if st, ok := status.FromError(err); ok {
		return fmt.Errorf("%s (%s)", st.Message(), st.Code())
	}
	return err
}

// Describe asks the plugin what it is. The protocol version is the one the
// plugin reports in its answer.
func (c *TransportClient) Describe(ctx context.Context) (Info, uint32, error) {
	r, err := c.rpc.Describe(ctx, &transportv1.DescribeRequest{})
	if err != nil {
		return Info{}, 0, rpcErr(err)
	}
	return Info{Name: r.Name, Version: r.Version, SameMachineOnly: r.SameMachineOnly, MemoryKinds: r.MemoryKinds}, r.ProtocolVersion, nil
}

// Probe asks whether the plugin can run here.
func (c *TransportClient) Probe(ctx context.Context) (ProbeResult, error) {
	r, err := c.rpc.Probe(ctx, &transportv1.ProbeRequest{})
	if err != nil {
		return ProbeResult{}, rpcErr(err)
	}
	pr := ProbeResult{Available: r.Available, Reason: r.Reason}
	for _, rl := range r.Rails {
		pr.Rails = append(pr.Rails, Rail{Name: rl.Name, NUMANode: int(rl.NumaNode), BandwidthGbps: rl.BandwidthGbps})
	}
	return pr, nil
}

// Start configures the plugin and returns its endpoint blob.
func (c *TransportClient) Start(ctx context.Context, cfg StartConfig) (Endpoint, error) {
	r, err := c.rpc.Start(ctx, &transportv1.StartRequest{
		Engine:       cfg.Engine,
		Incarnation:  cfg.Incarnation,
		MachineId:    cfg.MachineID,
		Config:       cfg.Config,
		ConfigFile:   cfg.ConfigFile,
		ConfigLine:   int32(cfg.ConfigLine),
		ConfigColumn: int32(cfg.ConfigColumn),
		ConfigByte:   int32(cfg.ConfigByte),
	})
	if err != nil {
		return nil, rpcErr(err)
	}
	return r.Endpoint, nil
}

var errNoFDSocket = errors.New("no fd socket: SetFDSender was not called")

// AttachLane sends the two ring memfds and starts lane id in the plugin.
// gen is the generation (run number) of this plugin process; the lane
// stamps it into the Flags of every completion. AttachLane returns the
// generation the plugin says it stamps: gen, or 0 from a plugin built
// before generations, whose completions carry none.
//
// spinSmall is the lane's spin budget after a run of small descriptors (0:
// spin); a lane whose transport assists (Assister) sleeps instead while
// that work is outstanding.
func (c *TransportClient) AttachLane(ctx context.Context, id, gen uint32, sq, cq *shm.Region, spin, spinSmall time.Duration) (uint32, error) {
	if c.fds == nil {
		return 0, errNoFDSocket
	}
	aid := c.nextAttach.Add(1)
	if err := c.fds.Send(aid, sq.FD(), cq.FD()); err != nil {
		return 0, fmt.Errorf("send ring fds: %w", err)
	}
	r, err := c.rpc.AttachLane(ctx, &transportv1.AttachLaneRequest{
		Lane: id, AttachId: aid,
		SubmitBytes: uint64(sq.Size()), CompleteBytes: uint64(cq.Size()),
		SpinNs: int64(spin), SpinSmallNs: int64(spinSmall), Generation: gen,
	})
	if err != nil {
		return 0, rpcErr(err)
	}
	return r.Generation, nil
}

func permToProto(p Perm) transportv1.Perm {
	switch p {
	case PermLocal:
		return transportv1.Perm_PERM_LOCAL
	case PermRemoteRead:
		return transportv1.Perm_PERM_REMOTE_READ
	case PermRemoteReadWrite:
		return transportv1.Perm_PERM_REMOTE_READ_WRITE
	}
	return transportv1.Perm_PERM_UNSPECIFIED
}

// RegisterMemory shares [off, off+length) of the memfd fd with the plugin
// as region id.
func (c *TransportClient) RegisterMemory(ctx context.Context, id uint32, fd int, off, length uint64, perm Perm, kind string) error {
	if c.fds == nil {
		return errNoFDSocket
	}
	aid := c.nextAttach.Add(1)
	if err := c.fds.Send(aid, fd); err != nil {
		return fmt.Errorf("send region fd: %w", err)
	}
	_, err := c.rpc.RegisterMemory(ctx, &transportv1.RegisterMemoryRequest{
		RegionId: id, AttachId: aid, Offset: off, Length: length, Perm: permToProto(perm), Kind: kind,
	})
	return rpcErr(err)
}

// UnregisterMemory makes the plugin forget and unmap region id.
func (c *TransportClient) UnregisterMemory(ctx context.Context, id uint32) error {
	_, err := c.rpc.UnregisterMemory(ctx, &transportv1.UnregisterMemoryRequest{RegionId: id})
	return rpcErr(err)
}

// OpenPeer tells the plugin how to reach a remote segment.
func (c *TransportClient) OpenPeer(ctx context.Context, p Peer) error {
	_, err := c.rpc.OpenPeer(ctx, &transportv1.OpenPeerRequest{
		PeerId: p.ID, Segment: p.Segment, Incarnation: p.Incarnation, MachineId: p.MachineID, Endpoint: p.Endpoint,
	})
	return rpcErr(err)
}

// ClosePeer makes the plugin forget a peer.
func (c *TransportClient) ClosePeer(ctx context.Context, id uint32) error {
	_, err := c.rpc.ClosePeer(ctx, &transportv1.ClosePeerRequest{PeerId: id})
	return rpcErr(err)
}

// Stats returns the plugin's counters.
func (c *TransportClient) Stats(ctx context.Context) (map[string]uint64, error) {
	r, err := c.rpc.Stats(ctx, &transportv1.StatsRequest{})
	if err != nil {
		return nil, rpcErr(err)
	}
	return r.Counters, nil
}

// Stop asks the plugin to end all work.
func (c *TransportClient) Stop(ctx context.Context) error {
	_, err := c.rpc.Stop(ctx, &transportv1.StopRequest{})
	return rpcErr(err)
}

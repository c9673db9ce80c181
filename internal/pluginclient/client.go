package pluginclient

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	transportv1 "github.com/ferrydev/ferry/internal/proto/transport/v1"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
	"github.com/ferrydev/ferry/sdk/shm"
)

// Client is the host's handle on a transport plugin's control plane.
// Launch returns one inside a Process, with the fd socket attached; New
// makes one over any gRPC connection (an in-process test harness).
type Client struct {
	rpc        transportv1.TransportClient
	fds        *shm.FDSender
	nextAttach atomic.Uint64
	name       atomic.Pointer[string] // the plugin's name, once Describe said it
	batch      atomic.Bool            // Describe said it takes RegisterMemoryBatch
}

// New returns a client over conn. fds is the host end of the plugin's fd
// socket; nil leaves RegisterMemory and AttachLane failing until
// SetFDSender.
func New(conn grpc.ClientConnInterface, fds *shm.FDSender) *Client {
	return &Client{rpc: transportv1.NewTransportClient(conn), fds: fds}
}

// SetFDSender gives the client the host end of the fd socket.
func (c *Client) SetFDSender(s *shm.FDSender) { c.fds = s }

// rpcErr strips gRPC's framing from a plugin's error so that the host can
// wrap it with the plugin's name.
func rpcErr(err error) error {
	if err == nil {
		return nil
	}
	if st, ok := status.FromError(err); ok {
		return fmt.Errorf("%s (%s)", clip(st.Message()), st.Code())
	}
	return err
}

// Description is what a plugin said about itself in Describe.
type Description struct {
	sdk.Info
	// Protocol is the protocol version the plugin says it serves on this
	// connection; it must be the one go-plugin negotiated.
	Protocol uint32
	// Interfaces are the optional interfaces the plugin's Transport
	// implements (sdk.InterfaceDrainer, ...), as the SDK found them.
	// Empty from a protocol-1 plugin, which has none.
	Interfaces []string
	// RegisterBatch: the plugin's SDK takes RegisterMemoryBatch; without
	// it RegisterMemoryBatch registers region by region.
	RegisterBatch bool
	// SealedRegions: the plugin's SDK takes RegisterSealed (and the
	// transport foreign memory, the path it writes a sealed region by).
	SealedRegions bool
}

// Implements reports whether the plugin listed the optional interface
// name (sdk.InterfaceDrainer, ...).
func (d Description) Implements(name string) bool {
	for _, n := range d.Interfaces {
		if n == name {
			return true
		}
	}
	return false
}

// Describe asks the plugin what it is and what it can do.
func (c *Client) Describe(ctx context.Context) (Description, error) {
	r, err := c.rpc.Describe(ctx, &transportv1.DescribeRequest{})
	if err != nil {
		return Description{}, rpcErr(err)
	}
	d := Description{
		Info: sdk.Info{
			Name: r.Name, Version: r.Version,
			SameMachineOnly: r.SameMachineOnly, MemoryKinds: kindsFromWire(r.MemoryKinds),
			MaxSlice: r.MaxSlice, PreferredSlice: r.PreferredSlice,
			ForeignMemory: r.ForeignMemory, ForeignLocalOnly: r.ForeignMemory && r.ForeignLocalOnly, TwoSided: r.TwoSided,
			TestTool: r.TestTool,
		},
		Protocol:      r.ProtocolVersion,
		Interfaces:    r.Interfaces,
		RegisterBatch: r.RegisterBatch,
		SealedRegions: r.SealedRegions,
	}
	for _, o := range r.Ops {
		op, err := opFromProto(o)
		if err != nil {
			return Description{}, fmt.Errorf("plugin %q describes itself: %w; the plugin was built for a newer protocol than it reports", r.Name, err)
		}
		d.Ops = append(d.Ops, op)
	}
	name := r.Name
	if len(name) > MaxRailName { // refused by the loader; never repeated in errors
		name = fmt.Sprintf("(a name of %d bytes)", len(name))
	}
	c.name.Store(&name)
	c.batch.Store(r.RegisterBatch)
	return d, nil
}

func opFromProto(o transportv1.Op) (ring.Op, error) {
	switch o {
	case transportv1.Op_OP_WRITE:
		return ring.OpWrite, nil
	case transportv1.Op_OP_READ:
		return ring.OpRead, nil
	}
	return 0, fmt.Errorf("unknown op %v in its capabilities", o)
}

// Probe asks whether the plugin can run here.
func (c *Client) Probe(ctx context.Context) (sdk.ProbeResult, error) {
	r, err := c.rpc.Probe(ctx, &transportv1.ProbeRequest{})
	if err != nil {
		return sdk.ProbeResult{}, rpcErr(err)
	}
	if err := checkProbe(c.pluginName(), r.Reason, len(r.Rails)); err != nil {
		return sdk.ProbeResult{}, err
	}
	pr := sdk.ProbeResult{Available: r.Available, Reason: r.Reason}
	for i, rl := range r.Rails {
		if len(rl.Name) > MaxRailName {
			return sdk.ProbeResult{}, fmt.Errorf("plugin %q probes out of bounds: its rail %d's name is %d bytes, over the cap of %d; the plugin is faulty or not a Ferry plugin", c.pluginName(), i, len(rl.Name), MaxRailName)
		}
		if err := checkRail(c.pluginName(), i, rl.NumaNode, rl.BandwidthGbps); err != nil {
			return sdk.ProbeResult{}, err
		}
		pr.Rails = append(pr.Rails, sdk.Rail{Name: rl.Name, NUMANode: int(rl.NumaNode), BandwidthGbps: rl.BandwidthGbps})
	}
	return pr, nil
}

// Start configures the plugin and returns its endpoint blob.
func (c *Client) Start(ctx context.Context, cfg sdk.StartConfig) (sdk.Endpoint, error) {
	r, err := c.rpc.Start(ctx, startRequest(cfg))
	if err != nil {
		return nil, rpcErr(err)
	}
	if len(r.Endpoint) > MaxEndpoint {
		return nil, fmt.Errorf("plugin %q starts out of bounds: its endpoint is %d bytes, over the cap of %d that peers read; the plugin is faulty or not a Ferry plugin", c.pluginName(), len(r.Endpoint), MaxEndpoint)
	}
	return r.Endpoint, nil
}

// spinNs is a spin budget as AttachLaneRequest.spin_ns says it: 0 is
// sent as -1 (none), since 0 there is "the SDK's default".
func spinNs(d time.Duration) int64 {
	if d <= 0 {
		return -1
	}
	return int64(d)
}

// LaneTiming is how a plugin lane spins and pauses (AttachLane).
type LaneTiming struct {
	// Spin is the lane's spin budget before it sleeps on its futex; 0:
	// none, the lane sleeps at once (sent as a negative budget, since an
	// unset one is the SDK's default).
	Spin time.Duration
	// SpinSmall is its budget after a run of small descriptors (0: Spin);
	// a lane whose transport assists (sdk.Assister) sleeps instead while
	// that work is outstanding.
	SpinSmall time.Duration
	// Pause is how long it leaves the submission ring alone after a short
	// run taken in a stream the host does not wait on (0: never); see
	// config.Transfer.StreamPause.
	Pause time.Duration
	// HandoffSleeps has the lane's long sleeps hand their P over; see
	// config.Transfer.HandoffSleeps.
	HandoffSleeps bool
}

var errNoFDSocket = errors.New("no fd socket: SetFDSender was not called")

// sendFDs sends fds over the fd socket under a new attach id, which the
// RPC that follows names; what says what they are, for the error.
func (c *Client) sendFDs(what string, fds ...int) (uint64, error) {
	if c.fds == nil {
		return 0, errNoFDSocket
	}
	aid := c.nextAttach.Add(1)
	if err := c.fds.Send(aid, fds...); err != nil {
		return 0, fmt.Errorf("send %s: %w", what, err)
	}
	return aid, nil
}

// AttachLane sends the two ring memfds and starts lane id in the plugin.
// gen is the generation (run number) of this plugin process; the lane
// stamps it into the Flags of every completion. AttachLane returns the
// generation the plugin says it stamps: gen, or 0 from a plugin built
// before generations, whose completions carry none.
//
// t is how the lane spins and pauses; see LaneTiming.
func (c *Client) AttachLane(ctx context.Context, id, gen uint32, sq, cq *shm.Region, t LaneTiming) (uint32, error) {
	if c.fds == nil { // before the regions are looked at
		return 0, errNoFDSocket
	}
	aid, err := c.sendFDs("ring fds", sq.FD(), cq.FD())
	if err != nil {
		return 0, err
	}
	r, err := c.rpc.AttachLane(ctx, &transportv1.AttachLaneRequest{
		Lane: id, AttachId: aid,
		SubmitBytes: uint64(sq.Size()), CompleteBytes: uint64(cq.Size()),
		SpinNs: spinNs(t.Spin), SpinSmallNs: int64(t.SpinSmall), PauseNs: int64(t.Pause), Generation: gen,
		HandoffSleeps: t.HandoffSleeps,
	})
	if err != nil {
		return 0, rpcErr(err)
	}
	return r.Generation, nil
}

func permToProto(p sdk.Perm) transportv1.Perm {
	switch p {
	case sdk.PermLocal:
		return transportv1.Perm_PERM_LOCAL
	case sdk.PermRemoteRead:
		return transportv1.Perm_PERM_REMOTE_READ
	case sdk.PermRemoteReadWrite:
		return transportv1.Perm_PERM_REMOTE_READ_WRITE
	}
	return transportv1.Perm_PERM_UNSPECIFIED
}

// RegisterMemory shares [off, off+length) of the memfd fd with the plugin
// as region id.
func (c *Client) RegisterMemory(ctx context.Context, id uint32, fd int, off, length uint64, perm sdk.Perm, kind sdk.MemoryKind) error {
	aid, err := c.sendFDs("region fd", fd)
	if err != nil {
		return err
	}
	_, err = c.rpc.RegisterMemory(ctx, &transportv1.RegisterMemoryRequest{
		RegionId: id, AttachId: aid, Offset: off, Length: length, Perm: permToProto(perm), Kind: string(kind),
	})
	return rpcErr(err)
}

// RegisterForeign makes [addr, addr+length) of process pid, memory the
// application allocated itself, known to the plugin as region id: no file
// is sent, and the plugin reaches the memory by cross-memory attach. Only
// for a plugin whose Describe says ForeignMemory.
func (c *Client) RegisterForeign(ctx context.Context, id uint32, pid int, addr, length uint64, perm sdk.Perm, kind sdk.MemoryKind) error {
	_, err := c.rpc.RegisterMemory(ctx, &transportv1.RegisterMemoryRequest{
		RegionId: id, HostPid: uint32(pid), Address: addr, Length: length, Perm: permToProto(perm), Kind: string(kind),
	})
	return rpcErr(err)
}

// RegisterSealed makes the file fd, sealed with F_SEAL_FUTURE_WRITE and
// exactly length bytes, known to the plugin as region id: it maps the
// file read-only and writes the region through [addr, addr+length) of
// process pid (the host's own, writable, mapping of it) by cross-memory
// attach. Only for a plugin whose Describe says SealedRegions.
func (c *Client) RegisterSealed(ctx context.Context, id uint32, fd int, length uint64, perm sdk.Perm, kind sdk.MemoryKind, pid int, addr uint64) error {
	aid, err := c.sendFDs("region fd", fd)
	if err != nil {
		return err
	}
	_, err = c.rpc.RegisterMemory(ctx, &transportv1.RegisterMemoryRequest{
		RegionId: id, AttachId: aid, Length: length, Perm: permToProto(perm), Kind: string(kind),
		WriterPid: uint32(pid), WriterAddress: addr,
	})
	return rpcErr(err)
}

// RegisterDevice makes the device memory h exports ([h.Offset,
// h.Offset+h.Length) of its allocation) known to the plugin as region id
// (sdk.DeviceImporter): no fd is sent, the plugin imports the handle.
// UnregisterMemory forgets it. A plugin without sdk.DeviceImporter, or
// of an older SDK, gives an error that says it does not import device
// memory and matches ErrUnimplemented; a handle that no longer opens, one
// that matches sdk.ErrStaleHandle.
func (c *Client) RegisterDevice(ctx context.Context, id uint32, perm sdk.Perm, kind sdk.MemoryKind, h sdk.Handle) error {
	if err := h.Check(); err != nil {
		return fmt.Errorf("register device region %d with plugin %q: %w", id, c.pluginName(), err)
	}
	_, err := c.rpc.RegisterDevice(ctx, &transportv1.RegisterDeviceRequest{
		RegionId: id, Perm: permToProto(perm), Kind: string(kind),
		Handle: &transportv1.DeviceHandle{Type: string(h.Type), Device: int32(h.Device), Data: h.Data, Size: h.Size, Offset: h.Offset, Length: h.Length},
	})
	switch status.Code(err) {
	case codes.OK:
		return nil
	case codes.Unimplemented:
		return &noDeviceImportError{UnimplementedError{Plugin: c.pluginName(), Method: "RegisterDevice", Interface: "sdk.DeviceImporter", Protocol: 2, Err: rpcErr(err)}}
	case codes.FailedPrecondition:
		if strings.Contains(status.Convert(err).Message(), sdk.ErrStaleHandle.Error()) {
			return fmt.Errorf("plugin %q: %w: %w", c.pluginName(), sdk.ErrStaleHandle, rpcErr(err))
		}
	case codes.NotFound:
		if strings.Contains(status.Convert(err).Message(), sdk.ErrNoDevice.Error()) {
			return fmt.Errorf("plugin %q: %w: %w", c.pluginName(), sdk.ErrNoDevice, rpcErr(err))
		}
	}
	return fmt.Errorf("plugin %q: %w", c.pluginName(), rpcErr(err))
}

// noDeviceImportError is the UnimplementedError of RegisterDevice, with
// the words an operator looks for.
type noDeviceImportError struct{ UnimplementedError }

func (e *noDeviceImportError) Error() string {
	return fmt.Sprintf("plugin %q does not import device memory: its Transport does not implement sdk.DeviceImporter (or it was built with an SDK older than it); register host memory with it, or use a device transport (nvlink)", e.Plugin)
}

// UnregisterMemory makes the plugin forget and unmap region id.
func (c *Client) UnregisterMemory(ctx context.Context, id uint32) error {
	_, err := c.rpc.UnregisterMemory(ctx, &transportv1.UnregisterMemoryRequest{RegionId: id})
	return rpcErr(err)
}

// OpenPeer tells the plugin how to reach a remote segment.
func (c *Client) OpenPeer(ctx context.Context, p sdk.Peer) error {
	_, err := c.rpc.OpenPeer(ctx, &transportv1.OpenPeerRequest{
		PeerId: p.ID, Segment: p.Segment, Incarnation: p.Incarnation, MachineId: p.MachineID, Endpoint: p.Endpoint,
	})
	return rpcErr(err)
}

// ClosePeer makes the plugin forget a peer.
func (c *Client) ClosePeer(ctx context.Context, id uint32) error {
	_, err := c.rpc.ClosePeer(ctx, &transportv1.ClosePeerRequest{PeerId: id})
	return rpcErr(err)
}

// Stats returns the plugin's counters.
func (c *Client) Stats(ctx context.Context) (map[string]uint64, error) {
	r, err := c.rpc.Stats(ctx, &transportv1.StatsRequest{})
	if err != nil {
		return nil, rpcErr(err)
	}
	if len(r.Counters) > MaxCounters {
		return nil, fmt.Errorf("plugin %q reports stats out of bounds: %d counters, over the cap of %d; the plugin is faulty", c.pluginName(), len(r.Counters), MaxCounters)
	}
	for k := range r.Counters {
		if len(k) > MaxCounterName {
			return nil, fmt.Errorf("plugin %q reports stats out of bounds: a counter name of %d bytes, over the cap of %d; the plugin is faulty", c.pluginName(), len(k), MaxCounterName)
		}
	}
	return r.Counters, nil
}

// Stop asks the plugin to end all work.
func (c *Client) Stop(ctx context.Context) error {
	_, err := c.rpc.Stop(ctx, &transportv1.StopRequest{})
	return rpcErr(err)
}

// Drain asks the plugin to finish what is in flight and accept nothing new
// (sdk.Drainer). A plugin without it, or built for protocol 1, answers
// with an *UnimplementedError, which errors.Is matches to
// ErrUnimplemented: the caller then stops the plugin without draining.
func (c *Client) Drain(ctx context.Context) error {
	_, err := c.rpc.Drain(ctx, &transportv1.DrainRequest{})
	if status.Code(err) == codes.Unimplemented {
		return &UnimplementedError{Plugin: c.pluginName(), Method: "Drain", Interface: "sdk.Drainer", Protocol: 2, Err: rpcErr(err)}
	}
	return rpcErr(err)
}

// Fence asks a two-sided plugin to apply nothing more of what engine
// from's plugin run sent (sdk.Fencer) and returns once nothing of it is
// being applied.
func (c *Client) Fence(ctx context.Context, from string, run uint64) (sdk.FenceResult, error) {
	r, err := c.rpc.Fence(ctx, &transportv1.FenceRequest{From: from, Run: run})
	if err != nil {
		if status.Code(err) == codes.Unimplemented {
			return sdk.FenceResult{}, &UnimplementedError{Plugin: c.pluginName(), Method: "Fence", Interface: "sdk.Fencer", Protocol: 2, Err: rpcErr(err)}
		}
		return sdk.FenceResult{}, fmt.Errorf("plugin %q: fence of engine %q's run %#x: %w", c.pluginName(), from, run, rpcErr(err))
	}
	return sdk.FenceResult{Connections: int(r.GetConnections()), Known: r.GetKnown()}, nil
}

// Abort asks the plugin to give back early the descriptors it holds whose
// tokens are listed (sdk.Aborter) and returns how many it found; their
// completions still arrive on the lanes. A plugin without it answers with
// an *UnimplementedError (errors.Is ErrUnimplemented): the caller then
// waits for the completions.
func (c *Client) Abort(ctx context.Context, tokens []uint64) (int, error) {
	r, err := c.rpc.Abort(ctx, &transportv1.AbortRequest{Tokens: tokens})
	if status.Code(err) == codes.Unimplemented {
		return 0, &UnimplementedError{Plugin: c.pluginName(), Method: "Abort", Interface: "sdk.Aborter", Protocol: 2, Err: rpcErr(err)}
	}
	if err != nil {
		return 0, rpcErr(err)
	}
	return int(r.GetAborted()), nil
}

// CheckConfig asks the plugin to decode and check cfg as Start would,
// starting nothing. A plugin without sdk.ConfigChecker gives
// ErrUnimplemented.
func (c *Client) CheckConfig(ctx context.Context, cfg sdk.StartConfig) error {
	_, err := c.rpc.CheckConfig(ctx, startRequest(cfg))
	if status.Code(err) == codes.Unimplemented {
		return &UnimplementedError{Plugin: c.pluginName(), Method: "CheckConfig", Interface: "sdk.ConfigChecker", Protocol: 2, Err: rpcErr(err)}
	}
	return rpcErr(err)
}

func startRequest(cfg sdk.StartConfig) *transportv1.StartRequest {
	return &transportv1.StartRequest{
		Engine:       cfg.Engine,
		Incarnation:  cfg.Incarnation,
		MachineId:    cfg.MachineID,
		Config:       cfg.Config,
		ConfigFile:   cfg.ConfigFile,
		ConfigLine:   int32(cfg.ConfigLine),
		ConfigColumn: int32(cfg.ConfigColumn),
		ConfigByte:   int32(cfg.ConfigByte),

		ClusterSecret: cfg.ClusterSecret,
		Run:           cfg.Run,
	}
}

func (c *Client) pluginName() string {
	if n := c.name.Load(); n != nil {
		return *n
	}
	return "(not described yet)"
}

// ErrUnimplemented is matched (errors.Is) by every *UnimplementedError.
var ErrUnimplemented = errors.New("plugin does not implement the method")

// UnimplementedError says that a plugin lacks an optional interface.
type UnimplementedError struct {
	Plugin    string // the plugin's name, as Describe gave it
	Method    string // "Drain"
	Interface string // "sdk.Drainer"
	Protocol  int    // the protocol version that introduced it
	Err       error  // what the plugin answered
}

func (e *UnimplementedError) Error() string {
	return fmt.Sprintf("plugin %q does not implement %s; needs SDK >= protocol %d (a plugin built with it whose Transport implements %s)",
		e.Plugin, e.Method, e.Protocol, e.Interface)
}

// Unwrap lets errors.Is find ErrUnimplemented and the plugin's answer.
func (e *UnimplementedError) Unwrap() []error { return []error{ErrUnimplemented, e.Err} }

// kindsFromWire is the memory kinds a plugin declared. A kind this host
// does not know is kept as declared: the selector only matches it.
func kindsFromWire(s []string) []sdk.MemoryKind {
	if s == nil {
		return nil
	}
	kinds := make([]sdk.MemoryKind, len(s))
	for i, k := range s {
		kinds[i] = sdk.MemoryKind(k)
	}
	return kinds
}

package sdk

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	transportv1 "github.com/ferrydev/ferry/internal/proto/transport/v1"
	"github.com/ferrydev/ferry/sdk/ring"
	"github.com/ferrydev/ferry/sdk/shm"
	"github.com/ferrydev/ferry/sdk/xmem"
)

// fdWait bounds how long a control call waits for the fds the host said it
// sent. The host sends them before it makes the call, so this only fires
// when the host is broken.
const fdWait = 10 * time.Second

// server is the plugin side of the control plane: it turns gRPC calls into
// Transport calls, maps the memory the host sends and runs the lanes.
type server struct {
	transportv1.UnimplementedTransportServer

	impl     Transport
	fds      *shm.FDReceiver
	protocol uint32 // the version go-plugin negotiated; Describe reports it

	mu       sync.Mutex
	started  bool
	stopped  bool
	regions  map[uint32]*regionMap
	lanes    map[uint32]*lane
	stopOnce sync.Once
}

func newServer(impl Transport, fds *shm.FDReceiver, protocol uint32) *server {
	return &server{
		impl:     impl,
		fds:      fds,
		protocol: protocol,
		regions:  make(map[uint32]*regionMap),
		lanes:    make(map[uint32]*lane),
	}
}

func (s *server) Describe(ctx context.Context, _ *transportv1.DescribeRequest) (*transportv1.DescribeResponse, error) {
	info, err := s.impl.Describe(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "describe: %v", err)
	}
	resp := &transportv1.DescribeResponse{
		Name:            info.Name,
		Version:         info.Version,
		ProtocolVersion: s.protocol,
		SameMachineOnly: info.SameMachineOnly,
		MemoryKinds:     kindStrings(info.MemoryKinds),
	}
	if s.protocol < 2 {
		// A version-1 host knows none of the capabilities.
		return resp, nil
	}
	for _, op := range info.Ops {
		o, err := opToProto(op)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "describe: Info.Ops: %v", err)
		}
		resp.Ops = append(resp.Ops, o)
	}
	resp.MaxSlice, resp.PreferredSlice = info.MaxSlice, info.PreferredSlice
	resp.Interfaces = implemented(s.impl)
	resp.ForeignMemory = info.ForeignMemory
	resp.ForeignLocalOnly = info.ForeignMemory && info.ForeignLocalOnly
	resp.TwoSided = info.TwoSided
	resp.TestTool = info.TestTool
	resp.RegisterBatch = true
	// A sealed region is written through the host's memory, the path of
	// foreign memory: a transport that takes that takes sealed regions.
	resp.SealedRegions = info.ForeignMemory
	return resp, nil
}

// opToProto converts an op a plugin declares it carries.
func opToProto(op ring.Op) (transportv1.Op, error) {
	switch op {
	case ring.OpWrite:
		return transportv1.Op_OP_WRITE, nil
	case ring.OpRead:
		return transportv1.Op_OP_READ, nil
	}
	return 0, fmt.Errorf("op %d is not a capability (only ring.OpWrite and ring.OpRead are)", op)
}

func (s *server) Probe(ctx context.Context, _ *transportv1.ProbeRequest) (*transportv1.ProbeResponse, error) {
	pr, err := s.impl.Probe(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "probe: %v", err)
	}
	resp := &transportv1.ProbeResponse{Available: pr.Available, Reason: pr.Reason}
	for _, r := range pr.Rails {
		resp.Rails = append(resp.Rails, &transportv1.Rail{Name: r.Name, NumaNode: int32(r.NUMANode), BandwidthGbps: r.BandwidthGbps})
	}
	return resp, nil
}

func (s *server) Start(ctx context.Context, req *transportv1.StartRequest) (*transportv1.StartResponse, error) {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return nil, status.Error(codes.FailedPrecondition, "start: plugin already started")
	}
	s.started = true
	s.mu.Unlock()
	ep, err := s.impl.Start(ctx, startConfig(req))
	if err != nil {
		s.mu.Lock()
		s.started = false
		s.mu.Unlock()
		return nil, status.Errorf(codes.InvalidArgument, "start: %v", err)
	}
	return &transportv1.StartResponse{Endpoint: ep}, nil
}

// takeFDs waits for the fds the host sent under id and checks their number.
func (s *server) takeFDs(ctx context.Context, id uint64, want int) ([]int, error) {
	if s.fds == nil {
		return nil, status.Error(codes.FailedPrecondition, "no fd socket: the plugin was not started by a Ferry host")
	}
	ctx, cancel := context.WithTimeout(ctx, fdWait)
	defer cancel()
	fds, err := s.fds.Take(ctx, id)
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "fds for attach id %d did not arrive: %v", id, err)
	}
	if len(fds) != want {
		closeFDs(fds)
		return nil, status.Errorf(codes.InvalidArgument, "attach id %d carried %d fds, want %d", id, len(fds), want)
	}
	return fds, nil
}

func (s *server) AttachLane(ctx context.Context, req *transportv1.AttachLaneRequest) (*transportv1.AttachLaneResponse, error) {
	fds, err := s.takeFDs(ctx, req.AttachId, 2)
	if err != nil {
		return nil, err
	}
	defer closeFDs(fds) // the mappings keep the memory alive
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil, status.Error(codes.FailedPrecondition, "attach lane: plugin stopped")
	}
	if _, ok := s.lanes[req.Lane]; ok {
		return nil, status.Errorf(codes.AlreadyExists, "lane %d already attached", req.Lane)
	}
	l, err := attachLane(s.impl, req.Lane, req.Generation, fds[0], fds[1], req.SubmitBytes, req.CompleteBytes, time.Duration(req.SpinNs), time.Duration(req.SpinSmallNs), time.Duration(req.PauseNs), req.HandoffSleeps)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "lane %d: %v", req.Lane, err)
	}
	s.lanes[req.Lane] = l
	l.start()
	return &transportv1.AttachLaneResponse{Generation: req.Generation}, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

func permFromProto(p transportv1.Perm) (Perm, error) {
	switch p {
	case transportv1.Perm_PERM_LOCAL:
		return PermLocal, nil
	case transportv1.Perm_PERM_REMOTE_READ:
		return PermRemoteRead, nil
	case transportv1.Perm_PERM_REMOTE_READ_WRITE:
		return PermRemoteReadWrite, nil
	}
	return 0, fmt.Errorf("unknown permission %v", p)
}

// regionMap is a registered region as the SDK holds it: the mapping the
// transport uses and the memfd it came from, kept open until the region is
// unregistered so that a transport can share it with a peer (Region.FD).
type regionMap struct {
	m  *shm.Mapping
	fd int
	// shared, when set, owns fd instead: regions of one batch that share
	// a memfd share one fd, closed with the last of them (batch.go).
	shared *sharedFD
}

func (r *regionMap) close() {
	if r.m == nil { // foreign memory: nothing mapped, no fd
		return
	}
	r.m.Close()
	if r.shared != nil {
		r.shared.release()
		return
	}
	unix.Close(r.fd)
}

func (s *server) RegisterMemory(ctx context.Context, req *transportv1.RegisterMemoryRequest) (*transportv1.RegisterMemoryResponse, error) {
	if req.HostPid != 0 {
		return s.registerForeign(ctx, req)
	}
	fds, err := s.takeFDs(ctx, req.AttachId, 1)
	if err != nil {
		return nil, err
	}
	// The fd stays open while the region is registered (Region.FD); every
	// failure below closes it.
	fd := fds[0]
	perm, err := permFromProto(req.Perm)
	if err != nil {
		unix.Close(fd)
		return nil, status.Errorf(codes.InvalidArgument, "register region %d: %v", req.RegionId, err)
	}
	if req.Length == 0 || req.Length > 1<<46 || req.Offset > 1<<46 {
		unix.Close(fd)
		return nil, status.Errorf(codes.InvalidArgument, "register region %d: bad range offset %d length %d", req.RegionId, req.Offset, req.Length)
	}
	s.mu.Lock()
	if _, ok := s.regions[req.RegionId]; ok {
		s.mu.Unlock()
		unix.Close(fd)
		return nil, status.Errorf(codes.AlreadyExists, "region %d already registered", req.RegionId)
	}
	s.mu.Unlock()
	var writer *Foreign
	if req.WriterPid != 0 {
		if writer, err = s.sealedWriter(ctx, req); err != nil {
			unix.Close(fd)
			return nil, err
		}
	}
	// A sealed region cannot be mapped writable (F_SEAL_FUTURE_WRITE):
	// it is mapped read-only and written through writer.
	m, err := shm.Map(fd, int64(req.Offset), int(req.Length), writer == nil)
	if err != nil {
		unix.Close(fd)
		return nil, status.Errorf(codes.InvalidArgument, "register region %d: %v", req.RegionId, err)
	}
	rm := &regionMap{m: m, fd: fd}
	s.mu.Lock()
	if _, ok := s.regions[req.RegionId]; ok {
		s.mu.Unlock()
		rm.close()
		return nil, status.Errorf(codes.AlreadyExists, "region %d already registered", req.RegionId)
	}
	s.regions[req.RegionId] = rm
	s.mu.Unlock()
	r := Region{ID: req.RegionId, Mem: m.Mem(), Perm: perm, Kind: MemoryKind(req.Kind), FD: fd, FDOffset: req.Offset, Foreign: writer}
	if err := s.impl.RegisterMemory(ctx, r); err != nil {
		s.mu.Lock()
		delete(s.regions, req.RegionId)
		s.mu.Unlock()
		rm.close()
		return nil, status.Errorf(codes.InvalidArgument, "register region %d: %v", req.RegionId, err)
	}
	return &transportv1.RegisterMemoryResponse{}, nil
}

// sealedWriter checks a sealed region's writer (the host's memory the
// plugin writes it through) as registerForeign checks foreign memory: the
// transport takes foreign memory, and it can reach the range.
func (s *server) sealedWriter(ctx context.Context, req *transportv1.RegisterMemoryRequest) (*Foreign, error) {
	if req.Offset != 0 || req.WriterAddress+req.Length < req.WriterAddress {
		return nil, status.Errorf(codes.InvalidArgument, "register sealed region %d: bad range offset %d, writer address %#x length %d", req.RegionId, req.Offset, req.WriterAddress, req.Length)
	}
	info, err := s.impl.Describe(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "register region %d: describe: %v", req.RegionId, err)
	}
	if !info.ForeignMemory {
		return nil, status.Errorf(codes.FailedPrecondition, "register sealed region %d: %s writes only memory it maps, and a sealed region cannot be mapped writable; the host sends sealed regions only to plugins whose Describe says sealed_regions", req.RegionId, info.Name)
	}
	var probe [1]byte
	for _, at := range [...]uint64{req.WriterAddress, req.WriterAddress + req.Length - 1} {
		if err := xmem.Read(int(req.WriterPid), at, probe[:]); err != nil {
			return nil, status.Errorf(codes.PermissionDenied, "register sealed region %d: %s cannot reach the host's memory to write it: %v", req.RegionId, info.Name, err)
		}
	}
	return &Foreign{PID: int(req.WriterPid), Addr: req.WriterAddress, Length: req.Length}, nil
}

// registerForeign registers memory the host's application allocated
// itself: nothing arrives on the fd socket and nothing is mapped. It is
// refused for a transport that does not declare Info.ForeignMemory, and
// it reads the first and the last byte of the range before the transport
// sees it, so that a kernel that forbids the attach fails the
// registration, never a transfer.
func (s *server) registerForeign(ctx context.Context, req *transportv1.RegisterMemoryRequest) (*transportv1.RegisterMemoryResponse, error) {
	perm, err := permFromProto(req.Perm)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "register region %d: %v", req.RegionId, err)
	}
	if req.Length == 0 || req.Length > 1<<46 || req.Address+req.Length < req.Address {
		return nil, status.Errorf(codes.InvalidArgument, "register region %d: bad range address %#x length %d", req.RegionId, req.Address, req.Length)
	}
	info, err := s.impl.Describe(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "register region %d: describe: %v", req.RegionId, err)
	}
	if !info.ForeignMemory {
		return nil, status.Errorf(codes.FailedPrecondition, "register region %d: %s maps the memory it moves and cannot take memory the application allocated itself; allocate it through the engine", req.RegionId, info.Name)
	}
	var probe [1]byte
	for _, at := range [...]uint64{req.Address, req.Address + req.Length - 1} {
		if err := xmem.Read(int(req.HostPid), at, probe[:]); err != nil {
			return nil, status.Errorf(codes.PermissionDenied, "register region %d: %s cannot reach the memory: %v", req.RegionId, info.Name, err)
		}
	}
	rm := &regionMap{fd: -1}
	s.mu.Lock()
	if _, ok := s.regions[req.RegionId]; ok {
		s.mu.Unlock()
		return nil, status.Errorf(codes.AlreadyExists, "region %d already registered", req.RegionId)
	}
	s.regions[req.RegionId] = rm
	s.mu.Unlock()
	r := Region{ID: req.RegionId, Perm: perm, Kind: MemoryKind(req.Kind), FD: -1,
		Foreign: &Foreign{PID: int(req.HostPid), Addr: req.Address, Length: req.Length}}
	if err := s.impl.RegisterMemory(ctx, r); err != nil {
		s.mu.Lock()
		delete(s.regions, req.RegionId)
		s.mu.Unlock()
		return nil, status.Errorf(codes.InvalidArgument, "register region %d: %v", req.RegionId, err)
	}
	return &transportv1.RegisterMemoryResponse{}, nil
}

func (s *server) UnregisterMemory(ctx context.Context, req *transportv1.UnregisterMemoryRequest) (*transportv1.UnregisterMemoryResponse, error) {
	s.mu.Lock()
	m, ok := s.regions[req.RegionId]
	s.mu.Unlock()
	if !ok {
		return nil, status.Errorf(codes.NotFound, "unregister: region %d is not registered", req.RegionId)
	}
	if err := s.impl.UnregisterMemory(ctx, req.RegionId); err != nil {
		return nil, status.Errorf(codes.Internal, "unregister region %d: %v", req.RegionId, err)
	}
	// The transport promised not to touch the memory (or the fd) again:
	// unmap it and close the fd.
	s.mu.Lock()
	delete(s.regions, req.RegionId)
	s.mu.Unlock()
	m.close()
	return &transportv1.UnregisterMemoryResponse{}, nil
}

func (s *server) OpenPeer(ctx context.Context, req *transportv1.OpenPeerRequest) (*transportv1.OpenPeerResponse, error) {
	err := s.impl.OpenPeer(ctx, Peer{
		ID:          req.PeerId,
		Segment:     req.Segment,
		Incarnation: req.Incarnation,
		MachineID:   req.MachineId,
		Endpoint:    req.Endpoint,
	})
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "open peer %q: %v", req.Segment, err)
	}
	return &transportv1.OpenPeerResponse{}, nil
}

func (s *server) ClosePeer(ctx context.Context, req *transportv1.ClosePeerRequest) (*transportv1.ClosePeerResponse, error) {
	if err := s.impl.ClosePeer(ctx, req.PeerId); err != nil {
		return nil, status.Errorf(codes.NotFound, "close peer %d: %v", req.PeerId, err)
	}
	return &transportv1.ClosePeerResponse{}, nil
}

func (s *server) Stats(ctx context.Context, _ *transportv1.StatsRequest) (*transportv1.StatsResponse, error) {
	c, err := s.impl.Stats(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "stats: %v", err)
	}
	if c == nil {
		c = make(map[string]uint64)
	}
	s.mu.Lock()
	if n := len(s.regions); n > 0 {
		c["regions_registered"] = uint64(n) // by the host, as the SDK maps them
	}
	for id, l := range s.lanes {
		c[fmt.Sprintf("lane%d_descriptors", id)] = l.submitted.Load()
		c[fmt.Sprintf("lane%d_sleeps", id)] = l.sleeps.Load()
		c[fmt.Sprintf("lane%d_assisted", id)] = l.assisted.Load()
	}
	s.mu.Unlock()
	return &transportv1.StatsResponse{Counters: c}, nil
}

// Drain is the Drainer's RPC; a Transport without it answers
// Unimplemented, the code a protocol-1 plugin's gRPC server answers too.
func (s *server) Drain(ctx context.Context, _ *transportv1.DrainRequest) (*transportv1.DrainResponse, error) {
	d, ok := s.impl.(Drainer)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "drain: the plugin's Transport does not implement sdk.Drainer")
	}
	if err := d.Drain(ctx); err != nil {
		code := codes.Internal
		if errors.Is(err, context.DeadlineExceeded) {
			code = codes.DeadlineExceeded
		} else if errors.Is(err, context.Canceled) {
			code = codes.Canceled
		}
		return nil, status.Errorf(code, "drain: %v", err)
	}
	return &transportv1.DrainResponse{}, nil
}

// Abort is the Aborter's RPC; a Transport without it answers
// Unimplemented, as for Drain.
func (s *server) Abort(ctx context.Context, req *transportv1.AbortRequest) (*transportv1.AbortResponse, error) {
	a, ok := s.impl.(Aborter)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "abort: the plugin's Transport does not implement sdk.Aborter")
	}
	n, err := a.Abort(ctx, req.GetTokens())
	if err != nil {
		return nil, status.Errorf(codes.Internal, "abort: %v", err)
	}
	return &transportv1.AbortResponse{Aborted: uint64(max(n, 0))}, nil
}

func (s *server) CheckConfig(ctx context.Context, req *transportv1.StartRequest) (*transportv1.CheckConfigResponse, error) {
	c, ok := s.impl.(ConfigChecker)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "check config: the plugin's Transport does not implement sdk.ConfigChecker")
	}
	if err := c.CheckConfig(ctx, startConfig(req)); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "%v", err)
	}
	return &transportv1.CheckConfigResponse{}, nil
}

// startConfig is req as the Transport sees it.
func startConfig(req *transportv1.StartRequest) StartConfig {
	return StartConfig{
		Engine:       req.Engine,
		Incarnation:  req.Incarnation,
		MachineID:    req.MachineId,
		Config:       req.Config,
		ConfigFile:   req.ConfigFile,
		ConfigLine:   int(req.ConfigLine),
		ConfigColumn: int(req.ConfigColumn),
		ConfigByte:   int(req.ConfigByte),

		ClusterSecret: req.ClusterSecret,
		Run:           req.Run,
	}
}

// Fence is the Fencer's RPC; a Transport without it answers
// Unimplemented.
func (s *server) Fence(ctx context.Context, req *transportv1.FenceRequest) (*transportv1.FenceResponse, error) {
	f, ok := s.impl.(Fencer)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "fence: the plugin's Transport does not implement sdk.Fencer")
	}
	if req.GetRun() == 0 || req.GetFrom() == "" {
		return nil, status.Error(codes.InvalidArgument, "fence: the request names no engine or no run (run 0 is no run)")
	}
	r, err := f.Fence(ctx, req.GetFrom(), req.GetRun())
	if err != nil {
		code := codes.Internal
		if errors.Is(err, ErrFenceNotYours) {
			code = codes.PermissionDenied
		}
		return nil, status.Errorf(code, "fence: %v", err)
	}
	return &transportv1.FenceResponse{Connections: uint32(max(r.Connections, 0)), Known: r.Known}, nil
}

// RegisterDevice is the DeviceImporter's RPC; a Transport without it
// answers Unimplemented. The region joins the SDK's table with nothing
// mapped (the transport imports the handle itself), so UnregisterMemory,
// its batch form and Stop forget it as any other.
func (s *server) RegisterDevice(ctx context.Context, req *transportv1.RegisterDeviceRequest) (*transportv1.RegisterDeviceResponse, error) {
	d, ok := s.impl.(DeviceImporter)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "register device: the plugin's Transport does not implement sdk.DeviceImporter")
	}
	perm, err := permFromProto(req.Perm)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "register device region %d: %v", req.RegionId, err)
	}
	h := handleFromProto(req.GetHandle())
	if err := h.Check(); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "register device region %d: %v", req.RegionId, err)
	}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil, status.Error(codes.FailedPrecondition, "register device: plugin stopped")
	}
	if _, ok := s.regions[req.RegionId]; ok {
		s.mu.Unlock()
		return nil, status.Errorf(codes.AlreadyExists, "region %d already registered", req.RegionId)
	}
	s.regions[req.RegionId] = &regionMap{fd: -1} // nothing mapped, no fd
	s.mu.Unlock()
	if err := d.RegisterDevice(ctx, req.RegionId, perm, MemoryKind(req.Kind), h); err != nil {
		s.mu.Lock()
		delete(s.regions, req.RegionId)
		s.mu.Unlock()
		code := codes.InvalidArgument
		switch {
		case errors.Is(err, ErrStaleHandle):
			code = codes.FailedPrecondition
		case errors.Is(err, ErrNoDevice):
			code = codes.NotFound
		}
		return nil, status.Errorf(code, "register device region %d: %v", req.RegionId, err)
	}
	return &transportv1.RegisterDeviceResponse{}, nil
}

// handleFromProto is h as the SDK's type; a missing handle is the zero
// Handle, which Check refuses.
func handleFromProto(h *transportv1.DeviceHandle) Handle {
	if h == nil {
		return Handle{}
	}
	return Handle{Type: HandleType(h.Type), Device: int(h.Device), Data: h.Data, Size: h.Size, Offset: h.Offset, Length: h.Length}
}

func (s *server) Stop(ctx context.Context, _ *transportv1.StopRequest) (*transportv1.StopResponse, error) {
	if err := s.stop(ctx); err != nil {
		return nil, status.Errorf(codes.Internal, "stop: %v", err)
	}
	return &transportv1.StopResponse{}, nil
}

// stop stops the lanes (no new descriptors reach the transport), then the
// transport (which completes what it holds), then unmaps everything.
func (s *server) stop(ctx context.Context) error {
	var err error
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.stopped = true
		lanes := s.lanes
		s.mu.Unlock()
		for _, l := range lanes {
			l.stopIntake()
		}
		err = s.impl.Stop(ctx)
		for _, l := range lanes {
			l.close()
		}
		s.mu.Lock()
		for id, m := range s.regions {
			m.close()
			delete(s.regions, id)
		}
		s.mu.Unlock()
	})
	return err
}

// kindStrings is kinds in their wire form.
func kindStrings(kinds []MemoryKind) []string {
	if kinds == nil {
		return nil
	}
	s := make([]string, len(kinds))
	for i, k := range kinds {
		s[i] = string(k)
	}
	return s
}

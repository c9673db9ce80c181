package sdk

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	devicev1 "github.com/ferrydev/ferry/internal/proto/device/v1"
	transportv1 "github.com/ferrydev/ferry/internal/proto/transport/v1"
	"github.com/ferrydev/ferry/sdk/ring"
	"github.com/ferrydev/ferry/sdk/shm"
)

// MaxCopyBatch is the most copies one Copy RPC carries; the server refuses
// more, and a host splits a longer list.
const MaxCopyBatch = 4096

// deviceServer is the plugin side of the device control plane: it turns
// gRPC calls into Device calls, maps the host memory the host sends and
// waits for each Copy batch's completions.
type deviceServer struct {
	devicev1.UnimplementedDeviceServer

	impl Device
	fds  *shm.FDReceiver

	mu       sync.Mutex
	stopped  bool
	hosts    map[uint32]*regionMap
	stopOnce sync.Once
}

func newDeviceServer(impl Device, fds *shm.FDReceiver) *deviceServer {
	return &deviceServer{impl: impl, fds: fds, hosts: make(map[uint32]*regionMap)}
}

// deviceSentinels are the errors that cross the boundary by name (see
// device.proto's ErrorDetail), with the code each travels under.
var deviceSentinels = []struct {
	err    error
	reason devicev1.ErrorDetail_Reason
	code   codes.Code
}{
	{ErrNotDevice, devicev1.ErrorDetail_REASON_NOT_DEVICE, codes.NotFound},
	{ErrCannotIdentify, devicev1.ErrorDetail_REASON_CANNOT_IDENTIFY, codes.Unimplemented},
	{ErrNoDevice, devicev1.ErrorDetail_REASON_NO_DEVICE, codes.OutOfRange},
	{ErrStaleHandle, devicev1.ErrorDetail_REASON_STALE_HANDLE, codes.FailedPrecondition},
}

// deviceError is err as a gRPC status: the code it would have, unless it
// wraps a sentinel, whose code it then takes with an ErrorDetail naming
// it. The message is what: err.
func deviceError(code codes.Code, what string, err error) error {
	msg := fmt.Sprintf("%s: %v", what, err)
	for _, s := range deviceSentinels {
		if !errors.Is(err, s.err) {
			continue
		}
		st, derr := status.New(s.code, msg).WithDetails(&devicev1.ErrorDetail{Reason: s.reason})
		if derr != nil {
			break
		}
		return st.Err()
	}
	return status.Error(code, msg)
}

func (s *deviceServer) Describe(ctx context.Context, _ *devicev1.DescribeRequest) (*devicev1.DescribeResponse, error) {
	info, err := s.impl.Describe(ctx)
	if err != nil {
		return nil, deviceError(codes.Internal, "describe", err)
	}
	resp := &devicev1.DescribeResponse{Name: info.Name, Version: info.Version, Kind: string(info.Kind), Simulated: info.Simulated}
	for _, h := range info.Handles {
		resp.Handles = append(resp.Handles, string(h))
	}
	return resp, nil
}

func (s *deviceServer) Probe(ctx context.Context, _ *devicev1.ProbeRequest) (*devicev1.ProbeResponse, error) {
	pr, err := s.impl.Probe(ctx)
	if err != nil {
		return nil, deviceError(codes.Internal, "probe", err)
	}
	return &devicev1.ProbeResponse{Available: pr.Available, Reason: pr.Reason}, nil
}

func (s *deviceServer) Start(ctx context.Context, req *transportv1.StartRequest) (*devicev1.StartResponse, error) {
	if err := s.impl.Start(ctx, startConfig(req)); err != nil {
		return nil, deviceError(codes.InvalidArgument, "start", err)
	}
	return &devicev1.StartResponse{}, nil
}

func (s *deviceServer) Devices(ctx context.Context, _ *devicev1.DevicesRequest) (*devicev1.DevicesResponse, error) {
	devs, err := s.impl.Devices(ctx)
	if err != nil {
		return nil, deviceError(codes.Internal, "devices", err)
	}
	resp := &devicev1.DevicesResponse{}
	for _, d := range devs {
		a := &devicev1.DeviceAttr{
			Index: int32(d.Index), Name: d.Name, Uuid: d.UUID, PciBusId: d.PCIBusID,
			NumaNode: int32(d.NUMANode), Memory: d.Memory, Link: d.Link,
		}
		for _, p := range d.Peers {
			a.Peers = append(a.Peers, int32(p))
		}
		resp.Devices = append(resp.Devices, a)
	}
	return resp, nil
}

func handleToWire(h Handle) *devicev1.Handle {
	return &devicev1.Handle{Type: string(h.Type), Device: int32(h.Device), Data: h.Data, Size: h.Size, Offset: h.Offset, Length: h.Length}
}

func (s *deviceServer) Identify(ctx context.Context, req *devicev1.IdentifyRequest) (*devicev1.IdentifyResponse, error) {
	id, err := s.impl.Identify(ctx, int(req.Pid), req.Address, req.Length)
	if err != nil {
		return nil, deviceError(codes.InvalidArgument, fmt.Sprintf("identify [%#x, +%d) of pid %d", req.Address, req.Length, req.Pid), err)
	}
	return &devicev1.IdentifyResponse{Device: int32(id.Device), Handle: handleToWire(id.Handle)}, nil
}

func (s *deviceServer) Allocate(ctx context.Context, req *devicev1.AllocateRequest) (*devicev1.AllocateResponse, error) {
	a, err := s.impl.Allocate(ctx, int(req.Device), req.Size)
	if err != nil {
		return nil, deviceError(codes.ResourceExhausted, fmt.Sprintf("allocate %d bytes on device %d", req.Size, req.Device), err)
	}
	return &devicev1.AllocateResponse{Device: int32(a.Device), Address: a.Addr, Size: a.Size, Handle: handleToWire(a.Handle)}, nil
}

func (s *deviceServer) Free(ctx context.Context, req *devicev1.FreeRequest) (*devicev1.FreeResponse, error) {
	if err := s.impl.Free(ctx, req.Address); err != nil {
		return nil, deviceError(codes.NotFound, fmt.Sprintf("free %#x", req.Address), err)
	}
	return &devicev1.FreeResponse{}, nil
}

func (s *deviceServer) Import(ctx context.Context, req *devicev1.ImportRequest) (*devicev1.ImportResponse, error) {
	w := req.GetHandle()
	h := Handle{Type: HandleType(w.GetType()), Device: int(w.GetDevice()), Data: w.GetData(), Size: w.GetSize(), Offset: w.GetOffset(), Length: w.GetLength()}
	what := fmt.Sprintf("import region %d", req.RegionId)
	if err := h.Check(); err != nil {
		return nil, deviceError(codes.InvalidArgument, what, err)
	}
	if err := s.impl.Import(ctx, req.RegionId, h); err != nil {
		return nil, deviceError(codes.InvalidArgument, what, err)
	}
	return &devicev1.ImportResponse{}, nil
}

func (s *deviceServer) Unimport(ctx context.Context, req *devicev1.UnimportRequest) (*devicev1.UnimportResponse, error) {
	if err := s.impl.Unimport(ctx, req.RegionId); err != nil {
		return nil, deviceError(codes.NotFound, fmt.Sprintf("unimport region %d", req.RegionId), err)
	}
	return &devicev1.UnimportResponse{}, nil
}

// RegisterHost maps the memfd the host sent, as the transport server's
// RegisterMemory does, and hands the mapping to the device.
func (s *deviceServer) RegisterHost(ctx context.Context, req *devicev1.RegisterHostRequest) (*devicev1.RegisterHostResponse, error) {
	if s.fds == nil {
		return nil, status.Error(codes.FailedPrecondition, "no fd socket: the plugin was not started by a Ferry host")
	}
	tctx, cancel := context.WithTimeout(ctx, fdWait)
	fds, err := s.fds.Take(tctx, req.AttachId)
	cancel()
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "fds for attach id %d did not arrive: %v", req.AttachId, err)
	}
	if len(fds) != 1 {
		closeFDs(fds)
		return nil, status.Errorf(codes.InvalidArgument, "attach id %d carried %d fds, want 1", req.AttachId, len(fds))
	}
	fd := fds[0] // open while the region is registered (Region.FD); every failure closes it
	if req.Length == 0 || req.Length > 1<<46 || req.Offset > 1<<46 {
		unix.Close(fd)
		return nil, status.Errorf(codes.InvalidArgument, "register host region %d: bad range offset %d length %d", req.RegionId, req.Offset, req.Length)
	}
	m, err := shm.Map(fd, int64(req.Offset), int(req.Length), true)
	if err != nil {
		unix.Close(fd)
		return nil, status.Errorf(codes.InvalidArgument, "register host region %d: %v", req.RegionId, err)
	}
	rm := &regionMap{m: m, fd: fd}
	s.mu.Lock()
	if _, ok := s.hosts[req.RegionId]; ok || s.stopped {
		s.mu.Unlock()
		rm.close()
		if ok {
			return nil, status.Errorf(codes.AlreadyExists, "host region %d already registered", req.RegionId)
		}
		return nil, status.Error(codes.FailedPrecondition, "register host region: plugin stopped")
	}
	s.hosts[req.RegionId] = rm
	s.mu.Unlock()
	r := Region{ID: req.RegionId, Mem: m.Mem(), Perm: PermLocal, Kind: MemoryCPU, FD: fd, FDOffset: req.Offset}
	if err := s.impl.RegisterHost(ctx, r); err != nil {
		s.mu.Lock()
		delete(s.hosts, req.RegionId)
		s.mu.Unlock()
		rm.close()
		return nil, deviceError(codes.InvalidArgument, fmt.Sprintf("register host region %d", req.RegionId), err)
	}
	return &devicev1.RegisterHostResponse{}, nil
}

func (s *deviceServer) UnregisterHost(ctx context.Context, req *devicev1.UnregisterHostRequest) (*devicev1.UnregisterHostResponse, error) {
	s.mu.Lock()
	m, ok := s.hosts[req.RegionId]
	s.mu.Unlock()
	if !ok {
		return nil, status.Errorf(codes.NotFound, "unregister: host region %d is not registered", req.RegionId)
	}
	if err := s.impl.UnregisterHost(ctx, req.RegionId); err != nil {
		return nil, deviceError(codes.Internal, fmt.Sprintf("unregister host region %d", req.RegionId), err)
	}
	// The device promised not to touch the memory again: unmap it.
	s.mu.Lock()
	delete(s.hosts, req.RegionId)
	s.mu.Unlock()
	m.close()
	return &devicev1.UnregisterHostResponse{}, nil
}

// copyBatch collects one Copy RPC's completions; done is closed with the
// last of them. A token completed twice, or one not in the batch, is
// ignored: the first report stands.
type copyBatch struct {
	mu      sync.Mutex
	index   map[uint64]int
	results []*devicev1.CopyResult
	left    int
	done    chan struct{}
}

func (b *copyBatch) Complete(token uint64, st ring.Status, bytes uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	i, ok := b.index[token]
	if !ok || b.results[i] != nil {
		return
	}
	b.results[i] = &devicev1.CopyResult{Token: token, Status: int32(st), Bytes: bytes}
	b.left--
	if b.left == 0 {
		close(b.done)
	}
}

// Copy hands each copy to the device and answers once all completed. A
// caller that gives up (ctx) gets its error; the copies still complete
// inside the plugin, which keeps the memory until then.
func (s *deviceServer) Copy(ctx context.Context, req *devicev1.CopyRequest) (*devicev1.CopyResponse, error) {
	n := len(req.Copies)
	if n == 0 {
		return &devicev1.CopyResponse{}, nil
	}
	if n > MaxCopyBatch {
		return nil, status.Errorf(codes.InvalidArgument, "copy: %d copies in one batch, over the cap of %d", n, MaxCopyBatch)
	}
	b := &copyBatch{index: make(map[uint64]int, n), results: make([]*devicev1.CopyResult, n), left: n, done: make(chan struct{})}
	for i, c := range req.Copies {
		if _, dup := b.index[c.Token]; dup {
			return nil, status.Errorf(codes.InvalidArgument, "copy: token %d appears twice in one batch", c.Token)
		}
		b.index[c.Token] = i
	}
	for _, c := range req.Copies {
		s.impl.Copy(DeviceCopy{
			Token:  c.Token,
			Src:    MemRef{Region: c.GetSrc().GetRegionId(), Offset: c.GetSrc().GetOffset()},
			Dst:    MemRef{Region: c.GetDst().GetRegionId(), Offset: c.GetDst().GetOffset()},
			Length: c.Length,
		}, b)
	}
	select {
	case <-b.done:
		return &devicev1.CopyResponse{Results: b.results}, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

func (s *deviceServer) Stop(ctx context.Context, _ *devicev1.StopRequest) (*devicev1.StopResponse, error) {
	if err := s.stop(ctx); err != nil {
		return nil, deviceError(codes.Internal, "stop", err)
	}
	return &devicev1.StopResponse{}, nil
}

// stop stops the device (which completes its copies and releases its
// imports and allocations), then unmaps the host regions; once.
func (s *deviceServer) stop(ctx context.Context) error {
	var err error
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.stopped = true
		s.mu.Unlock()
		err = s.impl.Stop(ctx)
		s.mu.Lock()
		for id, m := range s.hosts {
			m.close()
			delete(s.hosts, id)
		}
		s.mu.Unlock()
	})
	return err
}

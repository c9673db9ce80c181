package pluginclient

import (
	"context"
	"fmt"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	devicev1 "github.com/ferrydev/ferry/internal/proto/device/v1"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
	"github.com/ferrydev/ferry/sdk/shm"
)

// DeviceClient is the host's handle on a device plugin's control plane.
// LaunchDevice returns one inside a DeviceProcess, with the fd socket
// attached; NewDevice makes one over any gRPC connection.
//
// Errors that wrap sdk.ErrNotDevice, ErrCannotIdentify, ErrNoDevice or
// ErrStaleHandle in the plugin answer errors.Is for the same sentinel here,
// with the plugin's message (device.proto's ErrorDetail).
type DeviceClient struct {
	rpc devicev1.DeviceClient
	fds *shm.FDSender
	// nextAttach numbers the fds this client sends on the fd socket,
	// which is this client's alone.
	nextAttach atomic.Uint64
}

// NewDevice returns a device client over conn. fds is the host end of the
// plugin's fd socket; nil leaves RegisterHost failing.
func NewDevice(conn grpc.ClientConnInterface, fds *shm.FDSender) *DeviceClient {
	return &DeviceClient{rpc: devicev1.NewDeviceClient(conn), fds: fds}
}

// CopyResult is the outcome of one copy of a Copy batch.
type CopyResult struct {
	Status ring.Status
	Bytes  uint64
}

// deviceSentinels maps device.proto's ErrorDetail reasons back to the
// SDK's errors.
var deviceSentinels = map[devicev1.ErrorDetail_Reason]error{
	devicev1.ErrorDetail_REASON_NOT_DEVICE:      sdk.ErrNotDevice,
	devicev1.ErrorDetail_REASON_CANNOT_IDENTIFY: sdk.ErrCannotIdentify,
	devicev1.ErrorDetail_REASON_NO_DEVICE:       sdk.ErrNoDevice,
	devicev1.ErrorDetail_REASON_STALE_HANDLE:    sdk.ErrStaleHandle,
}

// DeviceError is a device plugin's error that named one of the SDK's
// sentinels: its message is the plugin's, and errors.Is finds the
// sentinel.
type DeviceError struct {
	Msg      string
	Sentinel error
}

func (e *DeviceError) Error() string { return e.Msg }

// Unwrap returns the sentinel.
func (e *DeviceError) Unwrap() error { return e.Sentinel }

// deviceErr is rpcErr for a device plugin: a status that carries an
// ErrorDetail becomes a *DeviceError.
func deviceErr(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, d := range st.Details() {
		if ed, ok := d.(*devicev1.ErrorDetail); ok {
			if s, ok := deviceSentinels[ed.Reason]; ok {
				return &DeviceError{Msg: clip(st.Message()), Sentinel: s}
			}
		}
	}
	return rpcErr(err)
}

// Describe asks the plugin what it is.
func (c *DeviceClient) Describe(ctx context.Context) (sdk.DeviceInfo, error) {
	r, err := c.rpc.Describe(ctx, &devicev1.DescribeRequest{})
	if err != nil {
		return sdk.DeviceInfo{}, deviceErr(err)
	}
	info := sdk.DeviceInfo{Name: r.Name, Version: r.Version, Kind: sdk.MemoryKind(r.Kind), Simulated: r.Simulated}
	for _, h := range r.Handles {
		info.Handles = append(info.Handles, sdk.HandleType(h))
	}
	return info, nil
}

// Probe asks whether the driver and a device are present.
func (c *DeviceClient) Probe(ctx context.Context) (sdk.ProbeResult, error) {
	r, err := c.rpc.Probe(ctx, &devicev1.ProbeRequest{})
	if err != nil {
		return sdk.ProbeResult{}, deviceErr(err)
	}
	if err := checkProbe("device plugin", r.Reason, 0); err != nil {
		return sdk.ProbeResult{}, err
	}
	return sdk.ProbeResult{Available: r.Available, Reason: r.Reason}, nil
}

// Start configures the plugin.
func (c *DeviceClient) Start(ctx context.Context, cfg sdk.StartConfig) error {
	_, err := c.rpc.Start(ctx, startRequest(cfg))
	return deviceErr(err)
}

// Devices lists the plugin's devices.
func (c *DeviceClient) Devices(ctx context.Context) ([]sdk.DeviceAttr, error) {
	r, err := c.rpc.Devices(ctx, &devicev1.DevicesRequest{})
	if err != nil {
		return nil, deviceErr(err)
	}
	devs := make([]sdk.DeviceAttr, 0, len(r.Devices))
	for _, d := range r.Devices {
		a := sdk.DeviceAttr{
			Index: int(d.Index), Name: d.Name, UUID: d.Uuid, PCIBusID: d.PciBusId,
			NUMANode: int(d.NumaNode), Memory: d.Memory, Link: d.Link,
		}
		for _, p := range d.Peers {
			a.Peers = append(a.Peers, int(p))
		}
		devs = append(devs, a)
	}
	return devs, nil
}

func handleFromWire(h *devicev1.Handle) sdk.Handle {
	return sdk.Handle{Type: sdk.HandleType(h.GetType()), Device: int(h.GetDevice()), Data: h.GetData(), Size: h.GetSize(), Offset: h.GetOffset(), Length: h.GetLength()}
}

// Identify asks whether [addr, addr+length) of process pid is memory of
// one of the plugin's devices.
func (c *DeviceClient) Identify(ctx context.Context, pid int, addr, length uint64) (sdk.Identity, error) {
	r, err := c.rpc.Identify(ctx, &devicev1.IdentifyRequest{Pid: uint32(pid), Address: addr, Length: length})
	if err != nil {
		return sdk.Identity{}, deviceErr(err)
	}
	return sdk.Identity{Device: int(r.Device), Handle: handleFromWire(r.Handle)}, nil
}

// Allocate makes size bytes of device memory on device dev.
func (c *DeviceClient) Allocate(ctx context.Context, dev int, size uint64) (sdk.Allocation, error) {
	r, err := c.rpc.Allocate(ctx, &devicev1.AllocateRequest{Device: int32(dev), Size: size})
	if err != nil {
		return sdk.Allocation{}, deviceErr(err)
	}
	return sdk.Allocation{Device: int(r.Device), Addr: r.Address, Size: r.Size, Handle: handleFromWire(r.Handle)}, nil
}

// Free releases an allocation of Allocate.
func (c *DeviceClient) Free(ctx context.Context, addr uint64) error {
	_, err := c.rpc.Free(ctx, &devicev1.FreeRequest{Address: addr})
	return deviceErr(err)
}

// Import has the plugin open h and name its range region.
func (c *DeviceClient) Import(ctx context.Context, region uint32, h sdk.Handle) error {
	_, err := c.rpc.Import(ctx, &devicev1.ImportRequest{RegionId: region, Handle: &devicev1.Handle{
		Type: string(h.Type), Device: int32(h.Device), Data: h.Data, Size: h.Size, Offset: h.Offset, Length: h.Length,
	}})
	return deviceErr(err)
}

// Unimport makes the plugin forget a region of Import.
func (c *DeviceClient) Unimport(ctx context.Context, region uint32) error {
	_, err := c.rpc.Unimport(ctx, &devicev1.UnimportRequest{RegionId: region})
	return deviceErr(err)
}

// RegisterHost shares [offset, offset+length) of the memfd fd with the
// plugin as host region region.
func (c *DeviceClient) RegisterHost(ctx context.Context, region uint32, fd int, offset, length uint64) error {
	if c.fds == nil {
		return errNoFDSocket
	}
	aid := c.nextAttach.Add(1)
	if err := c.fds.Send(aid, fd); err != nil {
		return fmt.Errorf("send host region fd: %w", err)
	}
	_, err := c.rpc.RegisterHost(ctx, &devicev1.RegisterHostRequest{RegionId: region, AttachId: aid, Offset: offset, Length: length})
	return deviceErr(err)
}

// UnregisterHost makes the plugin forget and unmap a host region.
func (c *DeviceClient) UnregisterHost(ctx context.Context, region uint32) error {
	_, err := c.rpc.UnregisterHost(ctx, &devicev1.UnregisterHostRequest{RegionId: region})
	return deviceErr(err)
}

// Copy runs copies and returns once every one completed, one result per
// copy in their order. A list longer than sdk.MaxCopyBatch goes in
// several calls.
func (c *DeviceClient) Copy(ctx context.Context, copies []sdk.DeviceCopy) ([]CopyResult, error) {
	out := make([]CopyResult, 0, len(copies))
	for len(copies) > 0 {
		n := min(len(copies), sdk.MaxCopyBatch)
		req := &devicev1.CopyRequest{Copies: make([]*devicev1.DeviceCopy, n)}
		for i, dc := range copies[:n] {
			req.Copies[i] = &devicev1.DeviceCopy{
				Token:  dc.Token,
				Src:    &devicev1.MemRef{RegionId: dc.Src.Region, Offset: dc.Src.Offset},
				Dst:    &devicev1.MemRef{RegionId: dc.Dst.Region, Offset: dc.Dst.Offset},
				Length: dc.Length,
			}
		}
		r, err := c.rpc.Copy(ctx, req)
		if err != nil {
			return nil, deviceErr(err)
		}
		if len(r.Results) != n {
			return nil, fmt.Errorf("device plugin answered %d results for %d copies; the plugin is faulty", len(r.Results), n)
		}
		for i, res := range r.Results {
			if res.GetToken() != req.Copies[i].Token {
				return nil, fmt.Errorf("device plugin answered copy %d with token %d, want %d; the plugin is faulty", i, res.GetToken(), req.Copies[i].Token)
			}
			st := ring.Status(res.GetStatus())
			if !st.Valid() {
				return nil, fmt.Errorf("device plugin answered copy %d with status %d, which this host does not know; the plugin is faulty", i, res.GetStatus())
			}
			out = append(out, CopyResult{Status: st, Bytes: res.GetBytes()})
		}
		copies = copies[n:]
	}
	return out, nil
}

// Stop asks the plugin to end all work and release what it holds.
func (c *DeviceClient) Stop(ctx context.Context) error {
	_, err := c.rpc.Stop(ctx, &devicev1.StopRequest{})
	return deviceErr(err)
}

package host

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
	"unsafe"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host/device"
	"github.com/ferrydev/ferry/host/loader"
	"github.com/ferrydev/ferry/host/staging"
	"github.com/ferrydev/ferry/internal/pluginclient"
	"github.com/ferrydev/ferry/sdk"
)

// DeviceBuffer is GPU memory the application registers (RegisterDevice).
type DeviceBuffer struct {
	// Addr is the application's device address of the range: the
	// pointer cudaMalloc or hipMalloc returned (plus an offset), or
	// DeviceMemory.Addr.
	Addr   uint64
	Length uint64
	// Kind names the memory: "cuda", "cuda:1", "rocm:0". "" asks the
	// device plugins which it is.
	Kind string
	// Handle, when set, exports the range: the application made it with
	// its own driver (cuIpcGetMemHandle for cudaMalloc memory, as PyTorch
	// allocates; a VMM allocation's file descriptor), since a device
	// plugin in another process cannot look into this one's pointers.
	// Nil: the device plugin finds the range (memory of AllocateDevice,
	// or of a device that lets it).
	Handle *sdk.Handle
}

// DeviceMemory is device memory a device plugin allocated for the
// application (AllocateDevice). The application reaches it through
// Handle with its own driver (cuMemImportFromShareableHandle), and
// registers it with RegisterDevice{Addr: m.Addr}.
type DeviceMemory struct {
	Kind   string // "cuda:0"
	Addr   uint64 // the allocation's device address, as the device plugin gave it
	Size   uint64
	Handle sdk.Handle
	plugin string
}

// DeviceBytes returns the device range [addr, addr+n) as the []byte that
// Request.Local takes. Its bytes live on the device: nothing in this
// process may read or write them through the slice (it would fault);
// the engine only uses its address and length.
func DeviceBytes(addr, n uint64) []byte {
	// The address is a number from another address space (the device's
	// or its driver's), never Go memory: its bits become the slice's
	// pointer as they are, which the garbage collector ignores.
	p := uintptr(addr)
	return unsafe.Slice(*(**byte)(unsafe.Pointer(&p)), n)
}

// RegisterDevice registers device memory so that requests can name it
// (Request.Local from DeviceBytes, or a peer's Remote) and publishes it
// with its kind. The device plugin of its kind (a device block; started
// now if it is not running) imports the range, by b.Handle or by finding
// it itself; where no transport reaches device memory directly, requests
// on it are staged through host memory (the staging block). It returns
// the address peers use, b.Addr.
//
// It fails, with nothing registered, for memory that is not device
// memory, a device index that is not the memory's, a handle of freed
// memory, and a kind no device plugin serves here.
func (e *Engine) RegisterDevice(ctx context.Context, b DeviceBuffer, perm Perm) (uint64, error) {
	if e.x.Closed() {
		return 0, ErrClosed
	}
	switch perm {
	case LocalOnly, RemoteRead, RemoteReadWrite:
	default:
		return 0, fmt.Errorf("%w: register device memory: unknown permission %d", ErrInvalid, perm)
	}
	ref, err := device.ParseRef(b.Kind)
	if err != nil {
		return 0, asKind(ErrInvalid, err)
	}
	r, err := e.devs.Register(ctx, os.Getpid(), b.Addr, b.Length, ref, b.Handle, perm)
	if err != nil {
		return 0, deviceErr(err)
	}
	if err := e.deviceRegistered(ctx, r); err != nil {
		if _, uerr := e.devs.Unregister(ctx, r.Base); uerr != nil {
			e.log.Warn("device memory not unregistered after a failed registration", "region", r.ID, "error", uerr)
		}
		return 0, err
	}
	if err := e.publish(ctx); err != nil {
		return 0, err
	}
	return r.Base, nil
}

// deviceRegistered readies the engine for requests on r: the staging
// pool, registered with r's device plugin, and r registered with the
// transports that move device memory themselves (nvlink).
func (e *Engine) deviceRegistered(ctx context.Context, r device.Region) error {
	pool, region, err := e.stagingPool(ctx)
	if err != nil {
		return err
	}
	if !e.devs.HostRegistered(r.Plugin, region) {
		fd, off, ok := e.mem.Memfd(addr(pool.Mem()), uintptr(len(pool.Mem())))
		if !ok {
			return fmt.Errorf("%w: the staging pool is not Engine.Allocate memory", ErrInvalid)
		}
		if err := e.devs.RegisterHost(ctx, r.Plugin, region, fd, off, uint64(len(pool.Mem()))); err != nil {
			return deviceErr(err)
		}
	}
	for _, ps := range e.x.Plugins() {
		p := ps.Proc()
		if !ps.Usable() || p == nil || !p.Implements(sdk.InterfaceDeviceImporter) {
			continue
		}
		if err := p.Client.RegisterDevice(ctx, r.ID, r.Perm, r.Kind, r.Handle); err != nil {
			e.log.Warn("a transport that moves device memory did not take a registration; requests on it are staged instead",
				"plugin", ps.Name(), "device", r.Name(), "error", err)
		}
	}
	return nil
}

// replayDevices gives a restarted transport that moves device memory
// (nvlink) the device ranges registered with it before.
func (e *Engine) replayDevices(ctx context.Context, p *loader.Plugin) error {
	if !p.Implements(sdk.InterfaceDeviceImporter) {
		return nil
	}
	for _, r := range e.devs.Regions() {
		if r.Lost != "" {
			continue
		}
		if err := p.Client.RegisterDevice(ctx, r.ID, r.Perm, r.Kind, r.Handle); err != nil {
			return fmt.Errorf("register %s region %d again: %w", r.Name(), r.ID, err)
		}
	}
	return nil
}

// stagingPool returns the engine's staging pool and its host region,
// allocating and registering it (with every transport, for peers' reads
// and writes of its slots) the first time.
func (e *Engine) stagingPool(ctx context.Context) (*staging.Pool, uint32, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if pool, region := e.x.StagingPool(); pool != nil {
		return pool, region, nil
	}
	sc := e.cfg.Staging
	mem, err := e.mem.Allocate(int(sc.Pool))
	if err != nil {
		return nil, 0, fmt.Errorf("staging pool of %d bytes (staging.pool): %w", sc.Pool, err)
	}
	p := addr(mem)
	if err := e.mem.Register(ctx, p, uintptr(len(mem)), RemoteReadWrite, e.memPlugins()); err != nil {
		e.mem.Release(p)
		return nil, 0, fmt.Errorf("staging pool: register with the transports: %w", localmemErr(err))
	}
	region, _, ok := e.mem.Lookup(uint64(p), uint64(len(mem)))
	if !ok {
		return nil, 0, fmt.Errorf("%w: staging pool registered but not found", ErrInvalid)
	}
	pool, err := staging.NewPool(mem, uint64(sc.SliceSize))
	if err != nil {
		return nil, 0, fmt.Errorf("staging block: %w", err)
	}
	e.x.EnableStaging(pool, uint64(p), region)
	return pool, region, nil
}

// UnregisterDevice removes the device registration that starts at addr.
func (e *Engine) UnregisterDevice(ctx context.Context, addr uint64) error {
	r, err := e.devs.Unregister(ctx, addr)
	if err != nil && r.ID == 0 {
		return deviceErr(err)
	}
	for _, ps := range e.x.Plugins() {
		if p := ps.Proc(); ps.Usable() && p != nil && p.Implements(sdk.InterfaceDeviceImporter) {
			p.Client.UnregisterMemory(ctx, r.ID)
		}
	}
	if perr := e.publish(ctx); perr != nil {
		return errors.Join(err, perr)
	}
	return err
}

// AllocateDevice has the device plugin of kind ("cuda", "cuda:1")
// allocate size bytes of device memory, exported (DeviceMemory.Handle)
// for the application to map with its own driver. Register it to move
// it.
func (e *Engine) AllocateDevice(ctx context.Context, kind string, size uint64) (DeviceMemory, error) {
	ref, err := device.ParseRef(kind)
	if err != nil {
		return DeviceMemory{}, asKind(ErrInvalid, err)
	}
	if ref.Kind == "" {
		return DeviceMemory{}, fmt.Errorf("%w: allocate device memory: name its kind (\"cuda\", \"cuda:0\")", ErrInvalid)
	}
	a, plugin, err := e.devs.Allocate(ctx, ref, size)
	if err != nil {
		return DeviceMemory{}, deviceErr(err)
	}
	return DeviceMemory{Kind: fmt.Sprintf("%s:%d", ref.Kind, a.Device), Addr: a.Addr, Size: a.Size, Handle: a.Handle, plugin: plugin}, nil
}

// FreeDevice frees memory of AllocateDevice. Unregister it first.
func (e *Engine) FreeDevice(ctx context.Context, m DeviceMemory) error {
	return deviceErr(e.devs.Free(ctx, m.plugin, m.Addr))
}

// deviceErr puts host/device's errors into the public taxonomy.
func deviceErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, device.ErrUnavailable):
		return asKind(ErrTransportUnavailable, err)
	case errors.Is(err, device.ErrNotRegistered):
		return asKind(ErrNotRegistered, err)
	case errors.Is(err, device.ErrCopy):
		return asKind(ErrPluginFailed, err)
	}
	return asKind(ErrInvalid, err)
}

// newDevices is the engine's device plugins, from its device blocks,
// none started.
func (e *Engine) newDevices() *device.Set {
	var names []string
	specs := map[string]loader.Spec{}
	bodies := map[string]sdk.StartConfig{}
	dir := ""
	if e.cfg.File != "" {
		dir = filepath.Dir(e.cfg.File)
	}
	for _, d := range e.cfg.Devices {
		if !d.Enabled {
			continue
		}
		names = append(names, d.Name)
		specs[d.Name] = loader.Spec{Name: d.Name, Path: loader.ResolveDevice(d.Name, d.Path, e.cfg.PluginDir, dir), SHA256: d.SHA256}
		bodies[d.Name] = sdk.StartConfig{Engine: e.name, Incarnation: e.incarnation, MachineID: e.machineID,
			Config: d.Body, ConfigFile: d.BodyFile, ConfigLine: d.BodyLine, ConfigColumn: d.BodyColumn, ConfigByte: d.BodyByte}
	}
	launch := func(ctx context.Context, name string) (*device.Proc, error) {
		return launchDevice(ctx, specs[name], bodies[name], e.log.Named("device."+name))
	}
	return device.New(names, launch, controlTimeout)
}

// launchDevice starts the device plugin of spec, and Starts it when its
// Probe says it can run here.
func launchDevice(ctx context.Context, spec loader.Spec, start sdk.StartConfig, log hclog.Logger) (*device.Proc, error) {
	img, err := pluginclient.OpenImage(spec.Path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return &device.Proc{Probe: sdk.ProbeResult{Reason: fmt.Sprintf("no binary at %s: run `make build`, or set the device block's path", spec.Path)}}, nil
		}
		return nil, err
	}
	defer img.Close()
	if sum := hex.EncodeToString(img.SHA256[:]); spec.SHA256 != "" && sum != spec.SHA256 {
		return nil, fmt.Errorf("%s: sha256 %s, but the device block says %s", spec.Path, sum, spec.SHA256)
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	dp, err := pluginclient.LaunchDevice(ctx, img, log)
	if err != nil {
		return nil, err
	}
	c := dp.Client
	fail := func(what string, err error) (*device.Proc, error) {
		dp.Kill()
		return nil, fmt.Errorf("%s (%s): %s: %w", spec.Name, spec.Path, what, err)
	}
	info, err := c.Describe(ctx)
	if err != nil {
		return fail("describe", err)
	}
	// Started first: its config may name the driver (a library path),
	// and Probe answers for what Start configured. A Start that fails
	// where Probe then says the driver is missing is that absence, not a
	// failure.
	serr := c.Start(ctx, start)
	probe, err := c.Probe(ctx)
	if err != nil {
		return fail("probe", err)
	}
	pr := &device.Proc{Info: info, Probe: probe}
	if !probe.Available {
		dp.Kill()
		return pr, nil
	}
	if serr != nil {
		return fail("start", serr)
	}
	if pr.Devices, err = c.Devices(ctx); err != nil {
		return fail("list devices", err)
	}
	pr.Client, pr.Pid, pr.Exited = deviceClient{c}, dp.PID(), dp.Exited()
	pr.Kill = func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		c.Stop(sctx)
		dp.Kill()
	}
	return pr, nil
}

// deviceClient is pluginclient's DeviceClient as host/device uses it.
type deviceClient struct{ *pluginclient.DeviceClient }

func (c deviceClient) Copy(ctx context.Context, copies []sdk.DeviceCopy) ([]device.CopyResult, error) {
	res, err := c.DeviceClient.Copy(ctx, copies)
	out := make([]device.CopyResult, len(res))
	for i, r := range res {
		out[i] = device.CopyResult{Status: r.Status, Bytes: r.Bytes}
	}
	return out, err
}

// DeviceProbe is what ProbeDevices found of one device block.
type DeviceProbe struct {
	Name, Path string
	Available  bool
	Reason     string // why not, or why it failed
	Failed     bool   // the binary did not start or answer
	Kind       sdk.MemoryKind
	Simulated  bool
	Devices    []sdk.DeviceAttr
}

// ProbeDevices starts each enabled device plugin of cfg alone, asks
// what it drives here, and stops it: what `ferry doctor` reports.
func ProbeDevices(ctx context.Context, cfg *config.Config) []DeviceProbe {
	dir := ""
	if cfg.File != "" {
		dir = filepath.Dir(cfg.File)
	}
	var out []DeviceProbe
	for _, d := range cfg.Devices {
		if !d.Enabled {
			continue
		}
		spec := loader.Spec{Name: d.Name, Path: loader.ResolveDevice(d.Name, d.Path, cfg.PluginDir, dir), SHA256: d.SHA256}
		start := sdk.StartConfig{Engine: cfg.Name, MachineID: cfg.MachineID, Config: d.Body, ConfigFile: d.BodyFile, ConfigLine: d.BodyLine, ConfigColumn: d.BodyColumn, ConfigByte: d.BodyByte}
		p := DeviceProbe{Name: d.Name, Path: spec.Path}
		pr, err := launchDevice(ctx, spec, start, hclog.NewNullLogger())
		switch {
		case err != nil:
			p.Failed, p.Reason = true, err.Error()
		case !pr.Probe.Available:
			p.Reason = pr.Probe.Reason
		default:
			p.Available, p.Kind, p.Simulated, p.Devices = true, pr.Info.Kind, pr.Info.Simulated, pr.Devices
			pr.Kill()
		}
		out = append(out, p)
	}
	return out
}

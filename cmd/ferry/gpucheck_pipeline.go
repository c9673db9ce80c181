package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/loader"
	"github.com/ferrydev/ferry/internal/pluginclient"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// pipelineReport is the pipelining check: a staged GPU → tcp → GPU
// transfer against the slowest of its hops, each measured alone in the
// same run, on a simulated device throttled to CopyBandwidth so that the
// device is the slowest hop.
type pipelineReport struct {
	CopyBandwidth string `json:"copy_bandwidth"`
	// Staged is GPU → peer GPU staged over tcp (three hops: device →
	// slot, slot → peer slot, peer slot → peer device).
	Staged figure `json:"staged_d2d"`
	// DeviceHop is the device plugin's copy of the same size, device →
	// host, on a plugin of its own with the same config.
	DeviceHop figure `json:"device_hop"`
	// TCPHop is host → peer host over tcp, the network hop alone.
	TCPHop  figure `json:"tcp_hop"`
	Slowest string `json:"slowest_hop"` // "device" or "tcp"
	// Ratio is Staged's median over the slowest hop's median: 1 is a
	// perfect pipeline, 1/3 none at all.
	Ratio float64 `json:"ratio"`
}

// pipeline runs the pipelining check on engines whose simulated device
// copies at bw.
func (c *gpuCheck) pipeline(ctx context.Context, bw string) (*pipelineReport, error) {
	p := &pipelineReport{CopyBandwidth: bw}
	s, err := c.newSide(ctx, gpuEngineConfig(fmt.Sprintf("gpucheck-pipe-%d", os.Getpid()), "", "simdev", false, bw))
	if err != nil {
		return nil, err
	}
	defer s.e.Close()
	peerName := fmt.Sprintf("gpucheck-pipepeer-%d", os.Getpid())
	t, peer, err := c.startGPUPeer(peerName, s.e.MetastoreURL(), false, bw)
	if err != nil {
		return nil, err
	}
	defer t.stop()
	if err := s.open(ctx, peerName); err != nil {
		return nil, err
	}
	hop, err := openDeviceHop(ctx, "simdev", fmt.Sprintf("devices = 1\ncopy_bandwidth = %q\n", bw), c.size)
	if err != nil {
		return nil, err
	}
	defer hop.close()
	var dev, tcp []float64
	for r := range c.runs {
		d, err := hop.copy(ctx)
		if err != nil {
			return nil, fmt.Errorf("device hop: %w", err)
		}
		dev = append(dev, rateGBps(c.size, d))
		fillRandom(s.src, uint64(100+r))
		t0 := time.Now()
		if err := s.e.Transfer(ctx, host.Request{Op: host.Write, Local: s.src, Segment: s.seg.ID, Remote: peer.HostBase, Transport: "tcp"}); err != nil {
			return nil, fmt.Errorf("tcp hop: %w", err)
		}
		tcp = append(tcp, rateGBps(c.size, time.Since(t0)))
		if err := c.roundTrip(ctx, "pipeline_staged", s, peer, uint64(200+r)); err != nil {
			return nil, err
		}
	}
	staged := c.samples["pipeline_staged_d2d"]
	for _, k := range []string{"h2d", "d2h", "d2d"} {
		delete(c.samples, "pipeline_staged_"+k)
	}
	p.Staged, p.DeviceHop, p.TCPHop = newFigure(staged), newFigure(dev), newFigure(tcp)
	slow := p.DeviceHop
	p.Slowest = "device"
	if p.TCPHop.Median < slow.Median {
		slow, p.Slowest = p.TCPHop, "tcp"
	}
	if slow.Median > 0 {
		p.Ratio = round3(p.Staged.Median / slow.Median)
	}
	return p, nil
}

// deviceHop is a device plugin started by this command alone, with
// device memory and a host region of its own, to time its copy.
type deviceHop struct {
	proc  *pluginclient.DeviceProcess
	names []string
	mem   []byte
	size  uint64
}

const (
	hopHostRegion   = 1
	hopDeviceRegion = 2
)

// launchDevicePlugin starts the device plugin name (ferry-device-<name>,
// found as the engine finds it) with the config body, and lists its
// devices. It fails with the probe's reason where the plugin cannot run.
func launchDevicePlugin(ctx context.Context, name, body string) (*pluginclient.DeviceProcess, []string, error) {
	img, err := pluginclient.OpenImage(loader.ResolveDevice(name, "", "", ""))
	if err != nil {
		return nil, nil, err
	}
	defer img.Close()
	dp, err := pluginclient.LaunchDevice(ctx, img, nil)
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (*pluginclient.DeviceProcess, []string, error) {
		dp.Kill()
		return nil, nil, fmt.Errorf("ferry-device-%s: %w", name, err)
	}
	probe, err := dp.Client.Probe(ctx)
	if err != nil {
		return fail(err)
	}
	if !probe.Available {
		return fail(fmt.Errorf("unavailable: %s", probe.Reason))
	}
	if err := dp.Client.Start(ctx, sdk.StartConfig{Engine: "gpu-check", MachineID: config.DefaultMachineID(),
		Config: []byte(body), ConfigFile: "gpu-check", ConfigLine: 1, ConfigColumn: 1}); err != nil {
		return fail(err)
	}
	devs, err := dp.Client.Devices(ctx)
	if err != nil {
		return fail(err)
	}
	var names []string
	for _, d := range devs {
		names = append(names, fmt.Sprintf("%d: %s", d.Index, d.Name))
	}
	return dp, names, nil
}

// deviceNames names the devices the plugin sees.
func deviceNames(ctx context.Context, name, body string) ([]string, error) {
	dp, names, err := launchDevicePlugin(ctx, name, body)
	if err != nil {
		return nil, err
	}
	stopDevicePlugin(dp)
	return names, nil
}

func stopDevicePlugin(dp *pluginclient.DeviceProcess) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	dp.Client.Stop(ctx)
	dp.Kill()
}

// openDeviceHop starts the plugin with size bytes of device memory and
// a host region (a memfd, as Engine.Allocate makes) of the same size.
func openDeviceHop(ctx context.Context, name, body string, size uint64) (*deviceHop, error) {
	dp, names, err := launchDevicePlugin(ctx, name, body)
	if err != nil {
		return nil, err
	}
	h := &deviceHop{proc: dp, names: names, size: size}
	if err := h.setup(ctx); err != nil {
		h.close()
		return nil, err
	}
	return h, nil
}

func (h *deviceHop) setup(ctx context.Context) error {
	fd, err := unix.MemfdCreate("ferry-gpucheck-hop", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return fmt.Errorf("memfd: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(h.size)); err != nil {
		return fmt.Errorf("memfd: %w", err)
	}
	// The SDK maps only memfds sealed against resizing, as
	// Engine.Allocate's are.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW); err != nil {
		return fmt.Errorf("memfd seals: %w", err)
	}
	if h.mem, err = unix.Mmap(fd, 0, int(h.size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return fmt.Errorf("mmap: %w", err)
	}
	fillRandom(h.mem, 9) // fault the pages in before timing
	c := h.proc.Client
	if err := c.RegisterHost(ctx, hopHostRegion, fd, 0, h.size); err != nil {
		return fmt.Errorf("register host memory: %w", err)
	}
	a, err := c.Allocate(ctx, 0, h.size)
	if err != nil {
		return fmt.Errorf("allocate: %w", err)
	}
	if err := c.Import(ctx, hopDeviceRegion, a.Handle); err != nil {
		return fmt.Errorf("import: %w", err)
	}
	return nil
}

// copy times one copy of the whole size, host → device: from the host
// memory setup wrote, so that the baseline reads written memory.
func (h *deviceHop) copy(ctx context.Context) (time.Duration, error) {
	t0 := time.Now()
	res, err := h.proc.Client.Copy(ctx, []sdk.DeviceCopy{{Token: 1,
		Src: sdk.MemRef{Region: hopHostRegion}, Dst: sdk.MemRef{Region: hopDeviceRegion}, Length: h.size}})
	el := time.Since(t0)
	if err != nil {
		return 0, err
	}
	if len(res) != 1 || res[0].Status != ring.StatusOK || res[0].Bytes != h.size {
		return 0, fmt.Errorf("copy ended %+v, want %d bytes OK", res, h.size)
	}
	return el, nil
}

func (h *deviceHop) close() {
	stopDevicePlugin(h.proc)
	if h.mem != nil {
		unix.Munmap(h.mem)
	}
}

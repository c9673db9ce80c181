package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
)

// cmdGPUCheck is the GPU check: this process runs two engines (one with
// the nvlink transport, one that stages device memory through host
// memory over tcp) and re-executes itself as a peer engine with device
// memory of its own (gpu-check-peer). It moves --size bytes
//
//   - host → peer GPU (H2D), GPU → GPU and peer GPU → host (D2H) through
//     nvlink, and the same staged over tcp, verifying each by reading the
//     bytes back into host memory (every run writes new random bytes, so
//     a transfer that moved nothing fails);
//   - with --device sim, the pipelining check: a staged GPU → GPU transfer
//     on engines whose simulated device copies at --sim-copy-bandwidth,
//     against its slowest hop (that device's copy alone, or tcp host →
//     host), both measured in the same run;
//
// and prints one JSON line (gpuReport). Each figure is the median and
// min–max of --runs interleaved runs, set against a baseline of the same
// size: a memmove here with --device sim, and for a real GPU the driver's
// own copies as --baseline gives them (scripts/gpu-check.sh measures them
// with torch and CUDA events), since the device plugin's copy is the
// thing under test.
func cmdGPUCheck(args []string) error {
	fs := flag.NewFlagSet("gpu-check", flag.ExitOnError)
	dev := fs.String("device", "sim", "sim (ferry-device-simdev, a simulated GPU) or cuda (ferry-device-cuda)")
	sizeStr := fs.String("size", "64MiB", "bytes per transfer")
	runs := fs.Int("runs", 3, "interleaved runs of every measurement (at least 3)")
	baseline := fs.String("baseline", "", "JSON file of the driver's own copy rates {\"d2d\":{...},\"h2d\":{...},\"d2h\":{...}} (GB/s: median, min, max) to set the figures against; with --device sim a memmove is measured instead")
	simBW := fs.String("sim-copy-bandwidth", "1GB/s", "with --device sim: the simulated device's copy_bandwidth in the pipelining check, making it the slowest hop; \"\" skips the check")
	lf := addLogFlags(fs)
	fs.Parse(args)
	size, err := config.ParseSize(*sizeStr)
	if err != nil {
		return err
	}
	if *runs < 3 {
		return fmt.Errorf("--runs %d: at least 3", *runs)
	}
	if *dev != "sim" && *dev != "cuda" {
		return fmt.Errorf("--device %q: want sim or cuda", *dev)
	}
	c := &gpuCheck{dev: *dev, size: uint64(size), runs: *runs, lf: lf}
	rep := c.run(context.Background(), *baseline, *simBW)
	line, _ := json.Marshal(rep)
	fmt.Println(string(line))
	if !rep.Pass {
		return fmt.Errorf("gpu check failed: %s", strings.Join(rep.Errors, "; "))
	}
	return nil
}

// gpuReport is the JSON line gpu-check prints.
type gpuReport struct {
	Check   string   `json:"check"`  // "gpu-check"
	Device  string   `json:"device"` // "sim" or "cuda"
	Plugin  string   `json:"device_plugin"`
	Devices []string `json:"device_names"` // as the device plugin names them
	Size    uint64   `json:"size"`
	Runs    int      `json:"runs"`
	// Figures are GB/s (bytes / wall time of Engine.Transfer), keyed by
	// path_direction: nvlink_h2d, nvlink_d2d, nvlink_d2h, staged_h2d,
	// staged_d2d, staged_d2h.
	Figures map[string]figure `json:"figures"`
	// Baseline is the same size copied by the driver (or by memmove on
	// the simulated device), keyed d2d, h2d, d2h.
	Baseline       map[string]figure  `json:"baseline"`
	BaselineSource string             `json:"baseline_source"`
	Ratios         map[string]float64 `json:"ratios"`   // figure median / its baseline's median
	Verified       map[string]bool    `json:"verified"` // every check, by name
	Pipeline       *pipelineReport    `json:"pipeline,omitempty"`
	Pass           bool               `json:"pass"`
	Errors         []string           `json:"errors,omitempty"`
}

// figure is the median and range of one measurement's runs, in GB/s.
type figure struct {
	Median  float64   `json:"median"`
	Min     float64   `json:"min"`
	Max     float64   `json:"max"`
	Samples []float64 `json:"samples"`
}

func newFigure(samples []float64) figure {
	s := slices.Clone(samples)
	slices.Sort(s)
	if len(s) == 0 {
		return figure{}
	}
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return figure{Median: round3(med), Min: round3(s[0]), Max: round3(s[len(s)-1]), Samples: roundAll(samples)}
}

func round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }

func roundAll(xs []float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = round3(x)
	}
	return out
}

func rateGBps(n uint64, d time.Duration) float64 { return float64(n) / d.Seconds() / 1e9 }

// gpuCheck is one run of the command.
type gpuCheck struct {
	dev  string
	size uint64
	runs int
	lf   logFlags

	rep     *gpuReport
	samples map[string][]float64
}

// fail records a failed check; the report then does not pass.
func (c *gpuCheck) fail(format string, args ...any) {
	c.rep.Errors = append(c.rep.Errors, fmt.Sprintf(format, args...))
}

// verify records check name as passed or not, and why not.
func (c *gpuCheck) verify(name string, ok bool, why string) {
	if prev, seen := c.rep.Verified[name]; seen && !prev {
		return // a failure stays
	}
	c.rep.Verified[name] = ok
	if !ok {
		c.fail("%s: %s", name, why)
	}
}

// pluginName is the device plugin that serves c.dev.
func (c *gpuCheck) pluginName() string {
	if c.dev == "sim" {
		return "simdev"
	}
	return "cuda"
}

func (c *gpuCheck) run(ctx context.Context, baselinePath, simBW string) *gpuReport {
	c.rep = &gpuReport{Check: "gpu-check", Device: c.dev, Plugin: "ferry-device-" + c.pluginName(), Size: c.size, Runs: c.runs,
		Figures: map[string]figure{}, Baseline: map[string]figure{}, Ratios: map[string]float64{}, Verified: map[string]bool{}}
	c.samples = map[string][]float64{}
	if names, err := deviceNames(ctx, c.pluginName(), ""); err != nil {
		c.fail("device plugin: %v", err)
	} else {
		c.rep.Devices = names
	}
	if len(c.rep.Errors) == 0 {
		if err := c.transfers(ctx); err != nil {
			c.fail("%v", err)
		}
	}
	for k, s := range c.samples {
		c.rep.Figures[k] = newFigure(s)
	}
	switch {
	case c.dev == "sim":
		c.rep.BaselineSource = "memmove of the same size in this process (Go copy between Engine.Allocate buffers), interleaved with the runs"
		if s := c.samples["memmove"]; len(s) > 0 {
			delete(c.rep.Figures, "memmove")
			for _, k := range []string{"d2d", "h2d", "d2h"} {
				c.rep.Baseline[k] = newFigure(s)
			}
		}
	case baselinePath != "":
		if err := c.readBaseline(baselinePath); err != nil {
			c.fail("--baseline: %v", err)
		}
	default:
		c.rep.BaselineSource = "none: pass --baseline (scripts/gpu-check.sh measures the driver's copies with torch)"
	}
	for k, f := range c.rep.Figures {
		dir := k[strings.LastIndexByte(k, '_')+1:]
		if b, ok := c.rep.Baseline[dir]; ok && b.Median > 0 {
			c.rep.Ratios[k+"_vs_baseline"] = round3(f.Median / b.Median)
		}
	}
	if c.dev == "sim" && simBW != "" && len(c.rep.Errors) == 0 {
		p, err := c.pipeline(ctx, simBW)
		if err != nil {
			c.fail("pipeline: %v", err)
		}
		c.rep.Pipeline = p
	}
	c.rep.Pass = len(c.rep.Errors) == 0
	return c.rep
}

// readBaseline reads the driver's figures that the script measured.
func (c *gpuCheck) readBaseline(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var in struct {
		Source string  `json:"source"`
		D2D    *figure `json:"d2d"`
		H2D    *figure `json:"h2d"`
		D2H    *figure `json:"d2h"`
	}
	if err := json.Unmarshal(b, &in); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	c.rep.BaselineSource = in.Source
	for k, f := range map[string]*figure{"d2d": in.D2D, "h2d": in.H2D, "d2h": in.D2H} {
		if f != nil {
			c.rep.Baseline[k] = *f
		}
	}
	return nil
}

// gpuEngineConfig is an engine for the check: tcp (and nvlink when
// asked) and the one device plugin of dev, joining the metastore at url
// when it is set. copyBW throttles the simulated device's copies.
func gpuEngineConfig(name, url, dev string, nvlink bool, copyBW string) *config.Config {
	cfg := loadDefault(name, url)
	cfg.Plugins = cfg.Plugins[:1] // tcp
	if nvlink {
		cfg.Plugins = append(cfg.Plugins, config.Plugin{Name: "nvlink", Enabled: true, BodyFile: "gpu-check", BodyLine: 1, BodyColumn: 1, DeclRange: "gpu-check"})
	}
	d := config.Plugin{Name: dev, Enabled: true, BodyFile: "gpu-check", BodyLine: 1, BodyColumn: 1, DeclRange: "gpu-check"}
	if dev == "simdev" {
		// Two simulated devices of 1 GiB each are the default; this many
		// bytes are needed of device 0.
		d.Body = []byte("devices = 1\nmemory = \"4GiB\"\n")
		if copyBW != "" {
			d.Body = append(d.Body, fmt.Sprintf("copy_bandwidth = %q\n", copyBW)...)
		}
	}
	cfg.Devices = []config.Plugin{d}
	return cfg
}

// loadDefault is the built-in config of name, on the HTTP metastore of
// the initiating engine at url when it is set.
func loadDefault(name, url string) *config.Config {
	cfg := config.Default(name)
	if url != "" {
		cfg.SetMetastore(config.Metastore{Kind: config.MetastoreHTTP, URL: url})
	}
	return cfg
}

// peerReady is gpu-check-peer's ready line.
type peerReady struct {
	Name       string `json:"name"`
	DeviceBase uint64 `json:"device_base"`
	HostBase   uint64 `json:"host_base"`
	Error      string `json:"error,omitempty"`
}

// startGPUPeer re-executes this binary as gpu-check-peer.
func (c *gpuCheck) startGPUPeer(name, url string, nvlink bool, copyBW string) (*target, peerReady, error) {
	var ready peerReady
	args := []string{"gpu-check-peer", "--name", name, "--metastore", url, "--device", c.pluginName(),
		"--size", fmt.Sprint(c.size), fmt.Sprintf("--nvlink=%t", nvlink), "--copy-bandwidth", copyBW}
	t, err := startSelf(append(args, c.lf.args()...), &ready)
	if err != nil {
		return nil, ready, err
	}
	if ready.Error != "" {
		t.stop()
		return nil, ready, fmt.Errorf("peer engine: %s", ready.Error)
	}
	return t, ready, nil
}

// cmdGPUCheckPeer is gpu-check's far engine: device memory and host
// memory of --size bytes each, registered read-write for peers, until
// stdin ends.
func cmdGPUCheckPeer(args []string) error {
	fs := flag.NewFlagSet("gpu-check-peer", flag.ExitOnError)
	name := fs.String("name", "", "engine name")
	url := fs.String("metastore", "", "metastore URL")
	dev := fs.String("device", "simdev", "device plugin")
	size := fs.Uint64("size", 64<<20, "bytes of each buffer")
	nvlink := fs.Bool("nvlink", true, "configure the nvlink transport")
	copyBW := fs.String("copy-bandwidth", "", "simdev's copy_bandwidth")
	lf := addLogFlags(fs)
	fs.Parse(args)
	ready := peerReady{Name: *name}
	say := func(err error) error {
		if err != nil {
			ready.Error = err.Error()
		}
		line, _ := json.Marshal(ready)
		fmt.Println(string(line))
		return err
	}
	log, err := lf.logger()
	if err != nil {
		return say(err)
	}
	ctx := context.Background()
	e, err := host.New(ctx, gpuEngineConfig(*name, *url, *dev, *nvlink, *copyBW), host.WithLogger(log))
	if err != nil {
		return say(err)
	}
	defer e.Close()
	m, err := e.AllocateDevice(ctx, "cuda:0", *size)
	if err != nil {
		return say(fmt.Errorf("allocate device memory: %w", err))
	}
	if ready.DeviceBase, err = e.RegisterDevice(ctx, host.DeviceBuffer{Addr: m.Addr, Length: *size, Kind: m.Kind}, host.RemoteReadWrite); err != nil {
		return say(fmt.Errorf("register device memory: %w", err))
	}
	hm, err := e.Allocate(int(*size))
	if err != nil {
		return say(err)
	}
	if ready.HostBase, err = e.Register(ctx, hm, host.RemoteReadWrite); err != nil {
		return say(err)
	}
	say(nil)
	buf := make([]byte, 256)
	for {
		if _, err := os.Stdin.Read(buf); err != nil {
			return nil
		}
	}
}

// side is one engine of this process with its buffers: device memory
// of its own, and host memory to fill and to check.
type side struct {
	e        *host.Engine
	dev      host.DeviceMemory
	src, chk []byte
	seg      host.Segment
}

func (c *gpuCheck) newSide(ctx context.Context, cfg *config.Config) (*side, error) {
	log, err := c.lf.logger()
	if err != nil {
		return nil, err
	}
	e, err := host.New(ctx, cfg, host.WithLogger(log))
	if err != nil {
		return nil, err
	}
	s := &side{e: e}
	if s.dev, err = e.AllocateDevice(ctx, "cuda:0", c.size); err != nil {
		e.Close()
		return nil, fmt.Errorf("%s: allocate device memory: %w", cfg.Name, err)
	}
	if _, err = e.RegisterDevice(ctx, host.DeviceBuffer{Addr: s.dev.Addr, Length: c.size, Kind: s.dev.Kind}, host.LocalOnly); err != nil {
		e.Close()
		return nil, fmt.Errorf("%s: register device memory: %w", cfg.Name, err)
	}
	for _, b := range []*[]byte{&s.src, &s.chk} {
		if *b, err = e.Allocate(int(c.size)); err == nil {
			_, err = e.Register(ctx, *b, host.LocalOnly)
		}
		if err != nil {
			e.Close()
			return nil, fmt.Errorf("%s: host memory: %w", cfg.Name, err)
		}
	}
	return s, nil
}

func (s *side) open(ctx context.Context, peer string) (err error) {
	s.seg, err = s.e.OpenSegment(ctx, peer)
	return err
}

// transfers runs the nvlink and the staged checks, interleaved with the
// memmove baseline on the simulated device.
func (c *gpuCheck) transfers(ctx context.Context) error {
	plugin := c.pluginName()
	nv, err := c.newSide(ctx, gpuEngineConfig(fmt.Sprintf("gpucheck-nv-%d", os.Getpid()), "", plugin, true, ""))
	if err != nil {
		return err
	}
	defer nv.e.Close()
	url := nv.e.MetastoreURL()
	st, err := c.newSide(ctx, gpuEngineConfig(fmt.Sprintf("gpucheck-st-%d", os.Getpid()), url, plugin, false, ""))
	if err != nil {
		return err
	}
	defer st.e.Close()
	peerName := fmt.Sprintf("gpucheck-peer-%d", os.Getpid())
	t, peer, err := c.startGPUPeer(peerName, url, true, "")
	if err != nil {
		return err
	}
	defer t.stop()
	for _, s := range []*side{nv, st} {
		if err := s.open(ctx, peerName); err != nil {
			return err
		}
	}
	c.checkRoute("nvlink", nv, peer.DeviceBase, false)
	c.checkRoute("staged", st, peer.DeviceBase, true)

	var a, b []byte // the memmove baseline's buffers
	if c.dev == "sim" {
		if a, err = nv.e.Allocate(int(c.size)); err != nil {
			return err
		}
		if b, err = nv.e.Allocate(int(c.size)); err != nil {
			return err
		}
		fillRandom(a, 1)
		copy(b, a)
	}
	for r := range c.runs {
		if a != nil {
			t0 := time.Now()
			copy(b, a)
			c.samples["memmove"] = append(c.samples["memmove"], rateGBps(c.size, time.Since(t0)))
		}
		for i, x := range []struct {
			name string
			s    *side
		}{{"nvlink", nv}, {"staged", st}} {
			if err := c.roundTrip(ctx, x.name, x.s, peer, uint64(r*2+i+2)); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkRoute verifies that a GPU → peer GPU request of s takes the path
// it is meant to: nvlink directly, or staged.
func (c *gpuCheck) checkRoute(name string, s *side, remote uint64, staged bool) {
	text, err := s.e.Explain(host.Request{Op: host.Write, Local: host.DeviceBytes(s.dev.Addr, c.size), Segment: s.seg.ID, Remote: remote})
	if err != nil {
		c.verify(name+"_route", false, err.Error())
		return
	}
	isStaged := strings.Contains(text, "staged through host memory")
	ok := isStaged == staged && (staged || strings.Contains(text, "nvlink"))
	c.verify(name+"_route", ok, "explain says:\n"+text)
}

// roundTrip is one run of path name on side s against the peer: new
// random bytes go host → peer GPU (h2d), come back peer GPU → host (d2h,
// checked), go peer GPU → this GPU, the peer GPU is overwritten, and this
// GPU → peer GPU (d2d) puts them back, checked by reading the peer GPU
// into host memory again. A transfer that moved nothing leaves other
// bytes and fails the check.
func (c *gpuCheck) roundTrip(ctx context.Context, name string, s *side, peer peerReady, seed uint64) error {
	n := c.size
	local := host.DeviceBytes(s.dev.Addr, n)
	timed := func(what string, req host.Request) bool {
		req.Segment, req.Remote = s.seg.ID, peer.DeviceBase
		t0 := time.Now()
		err := s.e.Transfer(ctx, req)
		el := time.Since(t0)
		if err != nil {
			c.verify(name+"_"+what, false, err.Error())
			return false
		}
		c.samples[name+"_"+what] = append(c.samples[name+"_"+what], rateGBps(n, el))
		return true
	}
	fillRandom(s.src, seed)
	if !timed("h2d", host.Request{Op: host.Write, Local: s.src}) {
		return nil
	}
	clear(s.chk)
	if !timed("d2h", host.Request{Op: host.Read, Local: s.chk}) {
		return nil
	}
	ok := bytes.Equal(s.chk, s.src)
	c.verify(name+"_h2d", ok, "the bytes read back differ from those written")
	c.verify(name+"_d2h", ok, "the bytes read back differ from those written")
	if err := s.e.Transfer(ctx, host.Request{Op: host.Read, Local: local, Segment: s.seg.ID, Remote: peer.DeviceBase}); err != nil {
		c.verify(name+"_d2d", false, "peer GPU → GPU: "+err.Error())
		return nil
	}
	// Overwrite the peer's GPU so that only the d2d write can put the
	// bytes back.
	fillRandom(s.chk, seed+1000)
	if err := s.e.Transfer(ctx, host.Request{Op: host.Write, Local: s.chk, Segment: s.seg.ID, Remote: peer.DeviceBase}); err != nil {
		c.verify(name+"_d2d", false, "overwrite the peer GPU: "+err.Error())
		return nil
	}
	if !timed("d2d", host.Request{Op: host.Write, Local: local}) {
		return nil
	}
	clear(s.chk)
	if err := s.e.Transfer(ctx, host.Request{Op: host.Read, Local: s.chk, Segment: s.seg.ID, Remote: peer.DeviceBase}); err != nil {
		c.verify(name+"_d2d", false, "read back: "+err.Error())
		return nil
	}
	c.verify(name+"_d2d", bytes.Equal(s.chk, s.src), "the bytes that went GPU → GPU → GPU differ from those written")
	return nil
}

// fillRandom fills b with bytes of seed, fast enough for GiBs.
func fillRandom(b []byte, seed uint64) {
	var key [32]byte
	key[0], key[1] = byte(seed), byte(seed>>8)
	rand.NewChaCha8(key).Read(b)
}

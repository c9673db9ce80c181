package rocm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/devices/internal/fakelib"
	"github.com/ferrydev/ferry/devices/rocm"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
)

// fakeLib and exporter are the FAKE HIP runtime and an exporter process
// over it, built by TestMain with gcc; plugin is the ferry-device-rocm
// binary, for the conformance suite.
var fakeLib, exporter, plugin string

func TestMain(m *testing.M) {
	fakelib.Main(m, fakelib.Setup{Name: "hip", Lib: "libfakehip.so", LibSrc: "testdata/fakehip.c", ExporterSrc: "testdata/fakehip_export.c",
		Plugin: "ferry-device-rocm"},
		func(b fakelib.Built) { fakeLib, exporter, plugin = b.Lib, b.Exporter, b.Plugin })
}

// completions records each copy's outcome; a token reported twice fails
// the test.
type completions struct {
	t  *testing.T
	ch chan outcome
}

type outcome struct {
	token uint64
	st    ring.Status
	n     uint64
}

func newCompletions(t *testing.T) *completions {
	return &completions{t: t, ch: make(chan outcome, 1024)}
}

func (c *completions) Complete(token uint64, st ring.Status, n uint64) {
	c.ch <- outcome{token, st, n}
}

// wait returns the next outcome, which must be token's.
func (c *completions) wait(token uint64) outcome {
	c.t.Helper()
	select {
	case o := <-c.ch:
		if o.token != token {
			c.t.Fatalf("completion for token %d, want %d", o.token, token)
		}
		return o
	case <-time.After(10 * time.Second):
		c.t.Fatalf("copy %d never completed", token)
	}
	return outcome{}
}

// none checks that nothing more was reported.
func (c *completions) none() {
	c.t.Helper()
	select {
	case o := <-c.ch:
		c.t.Fatalf("unexpected completion %+v", o)
	default:
	}
}

func live(t *testing.T) int {
	t.Helper()
	n, err := fakelib.Live(fakeLib, "fakehip_live")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// start returns a started plugin on the fake runtime; it is stopped, and
// everything it held checked released, at the end of the test.
func start(t *testing.T, config string) sdk.Device {
	t.Helper()
	ctx := context.Background()
	before, err := fakelib.Live(fakeLib, "fakehip_live")
	if err != nil && !errors.Is(err, fakelib.ErrNotLoaded) { // not loaded yet (the test runs alone): nothing held
		t.Fatal(err)
	}
	d := rocm.New()
	cfg := fmt.Sprintf("library = %q\n%s", fakeLib, config)
	if err := d.Start(ctx, sdk.StartConfig{Engine: "test", Config: []byte(cfg)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
		if n := live(t); n != before {
			t.Errorf("after Stop the fake runtime still holds %d objects, %d before Start", n, before)
		}
	})
	return d
}

func TestProbeWithoutLibrary(t *testing.T) {
	const path = "/nonexistent/libamdhip64.so"
	r, err := rocm.New(rocm.WithLibrary(path)).Probe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.Available || !strings.HasPrefix(r.Reason, path+" not found: ") || !strings.Contains(r.Reason, "No such file") {
		t.Fatalf("Probe = %+v, want unavailable, %q not found with dlerror's reason", r, path)
	}
}

func TestProbeAndDevices(t *testing.T) {
	ctx := context.Background()
	d := rocm.New(rocm.WithLibrary(fakeLib))
	r, err := d.Probe(ctx)
	if err != nil || !r.Available {
		t.Fatalf("Probe = %+v, %v", r, err)
	}
	info, _ := d.Describe(ctx)
	if info.Name != "rocm" || info.Kind != sdk.MemoryROCm || len(info.Handles) != 1 || info.Handles[0] != sdk.HandleHIPIPC {
		t.Fatalf("Describe = %+v", info)
	}
	devs, err := d.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 2 {
		t.Fatalf("%d devices, want the fake's 2", len(devs))
	}
	for i, a := range devs {
		if a.Index != i || a.Name != fmt.Sprintf("FAKE HIP device %d", i) || a.Memory != 1<<30 ||
			a.PCIBusID != fmt.Sprintf("0000:%02X:00.0", 0xf0+i) || !strings.HasPrefix(a.UUID, "GPU-") ||
			len(a.Peers) != 1 || a.Peers[0] != 1-i || a.Link != "xgmi" {
			t.Errorf("device %d = %+v", i, a)
		}
	}
}

func TestStartRejectsBadConfig(t *testing.T) {
	err := rocm.New().Start(context.Background(), sdk.StartConfig{Config: []byte("streams = 0")})
	if err == nil || !strings.Contains(err.Error(), "streams: 0 is outside 1..64") {
		t.Fatalf("Start with streams = 0: %v", err)
	}
}

// TestCopyRoundTrip runs Allocate, Import of the plugin's own handle,
// RegisterHost, and copies host to device, device to device (across the
// two devices) and device to host, checking the bytes.
func TestCopyRoundTrip(t *testing.T) {
	ctx := context.Background()
	d := start(t, "streams = 2")
	const size = 1 << 20
	a0, err := d.Allocate(ctx, 0, size)
	if err != nil {
		t.Fatal(err)
	}
	a1, err := d.Allocate(ctx, 1, size)
	if err != nil {
		t.Fatal(err)
	}
	if a0.Handle.Type != sdk.HandleHIPIPC || a0.Handle.Size != size || a0.Handle.Length != size || a0.Device != 0 || a1.Device != 1 {
		t.Fatalf("allocations %+v, %+v", a0, a1)
	}
	// Region 1: the second half of a0; region 2: all of a1.
	h := a0.Handle
	h.Offset, h.Length = size/2, size/2
	if err := d.Import(ctx, 1, h); err != nil {
		t.Fatal(err)
	}
	if err := d.Import(ctx, 2, a1.Handle); err != nil {
		t.Fatal(err)
	}
	host := fakelib.HostMem(t, size)
	if err := d.RegisterHost(ctx, sdk.Region{ID: 3, Mem: host}); err != nil {
		t.Fatal(err)
	}
	want := fakelib.Pattern(size/2, 5)
	copy(host, want)
	done := newCompletions(t)
	steps := []sdk.DeviceCopy{
		{Token: 1, Src: sdk.MemRef{Region: 3}, Dst: sdk.MemRef{Region: 1}, Length: size / 2},                                 // H2D
		{Token: 2, Src: sdk.MemRef{Region: 1}, Dst: sdk.MemRef{Region: 2, Offset: 4096}, Length: size / 2},                   // D2D, device 0 to 1
		{Token: 3, Src: sdk.MemRef{Region: 2, Offset: 4096}, Dst: sdk.MemRef{Region: 3, Offset: size / 2}, Length: size / 2}, // D2H
	}
	for _, c := range steps {
		d.Copy(c, done)
		if o := done.wait(c.Token); o.st != ring.StatusOK || o.n != c.Length {
			t.Fatalf("copy %d: %+v", c.Token, o)
		}
	}
	if !bytes.Equal(host[size/2:], want) {
		t.Fatal("bytes copied host to device to device to host differ")
	}
	done.none()

	// The plugin's own allocation: identified, with a handle into it.
	id, err := d.Identify(ctx, os.Getpid(), a0.Addr+100, 50)
	if err != nil || id.Device != 0 || id.Handle.Offset != 100 || id.Handle.Length != 50 || !bytes.Equal(id.Handle.Data, a0.Handle.Data) {
		t.Fatalf("Identify(own allocation) = %+v, %v", id, err)
	}
	if _, err := d.Identify(ctx, os.Getpid(), a0.Addr+size-10, 50); !errors.Is(err, sdk.ErrNotDevice) {
		t.Fatalf("Identify past the allocation's end: %v, want ErrNotDevice", err)
	}
	if _, err := d.Identify(ctx, 1234, 0x7f0000001000, 64); !errors.Is(err, sdk.ErrCannotIdentify) {
		t.Fatalf("Identify(another process's pointer): %v, want ErrCannotIdentify", err)
	}

	// Free keeps an imported allocation alive until its Unimport.
	if err := d.Free(ctx, a0.Addr); err != nil {
		t.Fatal(err)
	}
	d.Copy(sdk.DeviceCopy{Token: 4, Src: sdk.MemRef{Region: 1}, Dst: sdk.MemRef{Region: 3}, Length: 4096}, done)
	if o := done.wait(4); o.st != ring.StatusOK || !bytes.Equal(host[:4096], want[:4096]) {
		t.Fatalf("copy from a freed but imported allocation: %+v", o)
	}
	for _, id := range []uint32{1, 2} {
		if err := d.Unimport(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.UnregisterHost(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if err := d.Unimport(ctx, 1); err == nil {
		t.Fatal("a second Unimport of region 1 succeeded")
	}
}

func TestCopyRefused(t *testing.T) {
	ctx := context.Background()
	d := start(t, "")
	a, err := d.Allocate(ctx, 0, 8192)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Import(ctx, 1, a.Handle); err != nil {
		t.Fatal(err)
	}
	host := fakelib.HostMem(t, 8192)
	if err := d.RegisterHost(ctx, sdk.Region{ID: 2, Mem: host}); err != nil {
		t.Fatal(err)
	}
	if err := d.RegisterHost(ctx, sdk.Region{ID: 4, Mem: fakelib.HostMem(t, 4096)}); err != nil {
		t.Fatal(err)
	}
	done := newCompletions(t)
	for _, tc := range []struct {
		name string
		c    sdk.DeviceCopy
	}{
		{"unknown source", sdk.DeviceCopy{Src: sdk.MemRef{Region: 9}, Dst: sdk.MemRef{Region: 1}, Length: 1}},
		{"unknown destination", sdk.DeviceCopy{Src: sdk.MemRef{Region: 1}, Dst: sdk.MemRef{Region: 9}, Length: 1}},
		{"past the source's end", sdk.DeviceCopy{Src: sdk.MemRef{Region: 1, Offset: 8000}, Dst: sdk.MemRef{Region: 2}, Length: 193}},
		{"past the destination's end", sdk.DeviceCopy{Src: sdk.MemRef{Region: 2}, Dst: sdk.MemRef{Region: 1, Offset: 1}, Length: 8192}},
		{"offset overflow", sdk.DeviceCopy{Src: sdk.MemRef{Region: 2, Offset: ^uint64(0)}, Dst: sdk.MemRef{Region: 1}, Length: 2}},
		{"host to host", sdk.DeviceCopy{Src: sdk.MemRef{Region: 2}, Dst: sdk.MemRef{Region: 4}, Length: 1}},
	} {
		tc.c.Token = 77
		d.Copy(tc.c, done)
		if o := done.wait(77); o.st != ring.StatusInvalid || o.n != 0 {
			t.Errorf("%s: %+v, want StatusInvalid", tc.name, o)
		}
	}
	// A copy the driver fails (the fake's hook: an illegal address,
	// reported by the event) is StatusIO; the next copy works.
	t.Setenv("FAKEHIP_FAIL_LEN", "1234")
	d.Copy(sdk.DeviceCopy{Token: 5, Src: sdk.MemRef{Region: 2}, Dst: sdk.MemRef{Region: 1}, Length: 1234}, done)
	if o := done.wait(5); o.st != ring.StatusIO {
		t.Fatalf("failing copy: %+v, want StatusIO", o)
	}
	d.Copy(sdk.DeviceCopy{Token: 6, Src: sdk.MemRef{Region: 2}, Dst: sdk.MemRef{Region: 1}, Length: 1235}, done)
	if o := done.wait(6); o.st != ring.StatusOK {
		t.Fatalf("copy after a failed one: %+v", o)
	}
	done.none()
}

func TestImportErrors(t *testing.T) {
	ctx := context.Background()
	d := start(t, "")
	a, err := d.Allocate(ctx, 0, 4096)
	if err != nil {
		t.Fatal(err)
	}
	h := a.Handle
	h.Device = 2
	if err := d.Import(ctx, 1, h); !errors.Is(err, sdk.ErrNoDevice) {
		t.Fatalf("Import of a handle of device 2: %v, want ErrNoDevice", err)
	}
	if _, err := d.Allocate(ctx, 7, 4096); !errors.Is(err, sdk.ErrNoDevice) {
		t.Fatalf("Allocate on device 7: %v, want ErrNoDevice", err)
	}
	if err := d.Free(ctx, a.Addr); err != nil {
		t.Fatal(err)
	}
	err = d.Import(ctx, 1, a.Handle)
	if !errors.Is(err, sdk.ErrStaleHandle) || !strings.Contains(err.Error(), "hipErrorInvalidValue") {
		t.Fatalf("Import of a freed allocation: %v, want ErrStaleHandle naming the driver's error", err)
	}
	if err := d.Free(ctx, a.Addr); !errors.Is(err, sdk.ErrNotDevice) {
		t.Fatalf("second Free: %v", err)
	}
}

// TestImportFromAnotherProcess opens a handle exported by another process
// (the real open path: hipIpcOpenMemHandle), twice at two offsets sharing
// one open, and then, once the exporter freed it, fails with
// ErrStaleHandle.
func TestImportFromAnotherProcess(t *testing.T) {
	ctx := context.Background()
	const size = 65536
	x := fakelib.StartExporter(t, exporter, size)
	h := sdk.Handle{Type: sdk.HandleHIPIPC, Device: 0, Data: x.Handle, Size: size}

	d := start(t, "")
	whole := fakelib.Pattern(size, 3)
	host := fakelib.HostMem(t, size)
	if err := d.RegisterHost(ctx, sdk.Region{ID: 10, Mem: host}); err != nil {
		t.Fatal(err)
	}
	h1, h2 := h, h
	h1.Offset, h1.Length = 0, size/2
	h2.Offset, h2.Length = 1000, 3000
	if err := d.Import(ctx, 1, h1); err != nil {
		t.Fatal(err)
	}
	if err := d.Import(ctx, 2, h2); err != nil {
		t.Fatal(err)
	}
	// One open serves both regions: the fake runtime holds the host
	// registration and one mapping.
	if n := live(t); n != 2 {
		t.Fatalf("fake runtime holds %d objects, want 2 (one registration, one open)", n)
	}
	done := newCompletions(t)
	d.Copy(sdk.DeviceCopy{Token: 1, Src: sdk.MemRef{Region: 2}, Dst: sdk.MemRef{Region: 10}, Length: 3000}, done)
	if o := done.wait(1); o.st != ring.StatusOK || !bytes.Equal(host[:3000], whole[1000:4000]) {
		t.Fatalf("copy from region at offset 1000: %+v", o)
	}
	// Unimporting one region keeps the shared open for the other.
	if err := d.Unimport(ctx, 2); err != nil {
		t.Fatal(err)
	}
	d.Copy(sdk.DeviceCopy{Token: 2, Src: sdk.MemRef{Region: 1}, Dst: sdk.MemRef{Region: 10}, Length: size / 2}, done)
	if o := done.wait(2); o.st != ring.StatusOK || !bytes.Equal(host[:size/2], whole[:size/2]) {
		t.Fatalf("copy from region 1 after region 2 left: %+v", o)
	}
	if err := d.Unimport(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if n := live(t); n != 1 {
		t.Fatalf("fake runtime holds %d objects after the last Unimport, want 1 (the registration)", n)
	}

	x.Free(t)
	if err := d.Import(ctx, 3, h1); !errors.Is(err, sdk.ErrStaleHandle) {
		t.Fatalf("Import after the exporter freed: %v, want ErrStaleHandle", err)
	}
}

// TestStop: Stop releases what was left imported, allocated and
// registered (start's cleanup counts the fake's objects), and copies after
// it complete with StatusShutdown.
func TestStop(t *testing.T) {
	ctx := context.Background()
	d := start(t, "")
	a, err := d.Allocate(ctx, 1, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Import(ctx, 1, a.Handle); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Allocate(ctx, 0, 4096); err != nil {
		t.Fatal(err)
	}
	if err := d.RegisterHost(ctx, sdk.Region{ID: 2, Mem: fakelib.HostMem(t, 4096)}); err != nil {
		t.Fatal(err)
	}
	done := newCompletions(t)
	const n = 200
	for i := range uint64(n) {
		d.Copy(sdk.DeviceCopy{Token: i, Src: sdk.MemRef{Region: 2}, Dst: sdk.MemRef{Region: 1}, Length: 4096}, done)
	}
	if err := d.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// Every copy was reported exactly once by the time Stop returned,
	// as done or shut down.
	seen := make(map[uint64]bool)
	for range n {
		select {
		case o := <-done.ch:
			if seen[o.token] || (o.st != ring.StatusOK && o.st != ring.StatusShutdown) {
				t.Fatalf("completion %+v (seen before: %v)", o, seen[o.token])
			}
			seen[o.token] = true
		default:
			t.Fatalf("Stop returned with %d of %d copies reported", len(seen), n)
		}
	}
	done.none()
	d.Copy(sdk.DeviceCopy{Token: 999, Src: sdk.MemRef{Region: 2}, Dst: sdk.MemRef{Region: 1}, Length: 1}, done)
	if o := done.wait(999); o.st != ring.StatusShutdown {
		t.Fatalf("copy after Stop: %+v, want StatusShutdown", o)
	}
}

// TestConformance runs the device conformance suite against the
// ferry-device-rocm binary over the FAKE HIP runtime: the plugin's whole
// gRPC surface, as a host drives it, through the same dlopen code path a
// GPU machine takes.
func TestConformance(t *testing.T) {
	plugintest.RunDevice(t, plugintest.DeviceConfig{
		Binary: plugin,
		Config: []byte(fmt.Sprintf("library = %q\n", fakeLib)),
	})
}

package cuda_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/devices/cuda"
	"github.com/ferrydev/ferry/devices/internal/fakelib"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

func TestProbeWithoutLibrary(t *testing.T) {
	const path = "/nonexistent/libcuda.so.1"
	r, err := cuda.New(cuda.WithLibrary(path)).Probe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.Available || !strings.HasPrefix(r.Reason, path+" not found: ") || !strings.Contains(r.Reason, "No such file") {
		t.Fatalf("Probe = %+v, want unavailable, %q not found with dlerror's reason", r, path)
	}
}

// TestProbeDefault: with the default library the plugin is available, or
// says why, naming libcuda.so.1 or the driver's own failure.
func TestProbeDefault(t *testing.T) {
	r, err := cuda.New().Probe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !r.Available && !strings.Contains(r.Reason, "libcuda.so.1") && !strings.HasPrefix(r.Reason, "cuInit failed") && r.Reason != "no devices" {
		t.Fatalf("Probe = %+v", r)
	}
}

func TestDescribe(t *testing.T) {
	info, err := cuda.New().Describe(context.Background())
	if err != nil || info.Name != "cuda" || info.Kind != sdk.MemoryCUDA ||
		len(info.Handles) != 2 || info.Handles[0] != sdk.HandleCUDAFD || info.Handles[1] != sdk.HandleCUDAIPC {
		t.Fatalf("Describe = %+v, %v", info, err)
	}
}

// TestNotStarted: without a driver, Start fails with the reason and the
// plugin refuses work without touching the library.
func TestNotStarted(t *testing.T) {
	ctx := context.Background()
	d := cuda.New(cuda.WithLibrary("/nonexistent/libcuda.so.1"))
	if err := d.Start(ctx, sdk.StartConfig{}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("Start without a driver: %v", err)
	}
	if _, err := d.Identify(ctx, 1, 0x1000, 1); !errors.Is(err, sdk.ErrCannotIdentify) {
		t.Fatalf("Identify: %v, want ErrCannotIdentify", err)
	}
	if err := d.Import(ctx, 1, sdk.Handle{Type: sdk.HandleCUDAFD, Data: make([]byte, 8), Size: 1, Length: 1}); err == nil {
		t.Fatal("Import on a plugin that did not start succeeded")
	}
	got := make(chan ring.Status, 1)
	d.Copy(sdk.DeviceCopy{Token: 1, Length: 1}, completer(func(_ uint64, st ring.Status, _ uint64) { got <- st }))
	if st := <-got; st != ring.StatusShutdown {
		t.Fatalf("Copy before Start: %v", st)
	}
	if err := d.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

type completer func(uint64, ring.Status, uint64)

func (f completer) Complete(token uint64, st ring.Status, n uint64) { f(token, st, n) }

// The tests below run the plugin in this process on the FAKE CUDA driver
// (testdata/fakecuda.c, built by TestMain).

// outcome is one copy's completion.
type outcome struct {
	token uint64
	st    ring.Status
	n     uint64
}

func collect() (chan outcome, completer) {
	ch := make(chan outcome, 1024)
	return ch, completer(func(token uint64, st ring.Status, n uint64) { ch <- outcome{token, st, n} })
}

func waitFor(t *testing.T, ch chan outcome, token uint64) outcome {
	t.Helper()
	select {
	case o := <-ch:
		if o.token != token {
			t.Fatalf("completion for token %d, want %d", o.token, token)
		}
		return o
	case <-time.After(10 * time.Second):
		t.Fatalf("copy %d never completed", token)
	}
	return outcome{}
}

func live(t *testing.T) int {
	t.Helper()
	n, err := fakelib.Live(fakeLib, "fakecuda_live")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// start returns a started plugin on the fake driver; it is stopped, and
// everything it held checked released, at the end of the test.
func start(t *testing.T, config string) sdk.Device {
	t.Helper()
	ctx := context.Background()
	d := cuda.New()
	cfg := fmt.Sprintf("library = %q\n%s", fakeLib, config)
	if err := d.Start(ctx, sdk.StartConfig{Engine: "test", Config: []byte(cfg)}); err != nil {
		t.Fatal(err)
	}
	before := 0 // the library is loaded by Start; nothing is held before it
	t.Cleanup(func() {
		if err := d.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
		if n := live(t); n != before {
			t.Errorf("after Stop the fake driver still holds %d objects, %d before Start", n, before)
		}
	})
	return d
}

func TestProbeAndDevices(t *testing.T) {
	ctx := context.Background()
	d := cuda.New(cuda.WithLibrary(fakeLib))
	r, err := d.Probe(ctx)
	if err != nil || !r.Available {
		t.Fatalf("Probe = %+v, %v", r, err)
	}
	devs, err := d.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 2 {
		t.Fatalf("%d devices, want the fake's 2", len(devs))
	}
	for i, a := range devs {
		if a.Index != i || a.Name != fmt.Sprintf("FAKE CUDA device %d", i) || a.Memory != 1<<30 ||
			a.PCIBusID != fmt.Sprintf("0000:%02X:00.0", 0xc0+i) || !strings.HasPrefix(a.UUID, "GPU-") ||
			len(a.Peers) != 1 || a.Peers[0] != 1-i || a.Link != "nvlink" {
			t.Errorf("device %d = %+v", i, a)
		}
	}
}

// TestCopyRoundTrip: Allocate on both devices, Import of the plugin's own
// cuda-fd handles, RegisterHost, and copies host to device, device to
// device and device to host, checking the bytes; start's cleanup checks
// that Stop released everything.
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
	if a0.Handle.Type != sdk.HandleCUDAFD || a0.Handle.Size != size || a0.Size != size || a0.Device != 0 || a1.Device != 1 {
		t.Fatalf("allocations %+v, %+v", a0, a1)
	}
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
	ch, done := collect()
	for _, c := range []sdk.DeviceCopy{
		{Token: 1, Src: sdk.MemRef{Region: 3}, Dst: sdk.MemRef{Region: 1}, Length: size / 2},                                 // H2D
		{Token: 2, Src: sdk.MemRef{Region: 1}, Dst: sdk.MemRef{Region: 2, Offset: 4096}, Length: size / 2},                   // D2D, device 0 to 1
		{Token: 3, Src: sdk.MemRef{Region: 2, Offset: 4096}, Dst: sdk.MemRef{Region: 3, Offset: size / 2}, Length: size / 2}, // D2H
	} {
		d.Copy(c, done)
		if o := waitFor(t, ch, c.Token); o.st != ring.StatusOK || o.n != c.Length {
			t.Fatalf("copy %d: %+v", c.Token, o)
		}
	}
	if !bytes.Equal(host[size/2:], want) {
		t.Fatal("bytes copied host to device to device to host differ")
	}
	for _, id := range []uint32{1, 2} {
		if err := d.Unimport(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.UnregisterHost(ctx, 3); err != nil {
		t.Fatal(err)
	}
}

// TestImportFreed: a freed allocation's cuda-fd handle no longer opens
// (its fd is closed): ErrStaleHandle.
func TestImportFreed(t *testing.T) {
	ctx := context.Background()
	d := start(t, "")
	a, err := d.Allocate(ctx, 0, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Free(ctx, a.Addr); err != nil {
		t.Fatal(err)
	}
	if err := d.Import(ctx, 1, a.Handle); !errors.Is(err, sdk.ErrStaleHandle) {
		t.Fatalf("Import of a freed allocation: %v, want ErrStaleHandle", err)
	}
}

// TestGranularity: Allocate rounds up to the driver's granularity (2 MiB
// here, as on a real GPU) and says so in the allocation and its handle.
func TestGranularity(t *testing.T) {
	t.Setenv("FAKECUDA_GRANULARITY", fmt.Sprint(2<<20))
	ctx := context.Background()
	d := start(t, "")
	a, err := d.Allocate(ctx, 1, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if a.Size != 2<<20 || a.Handle.Size != 2<<20 || a.Handle.Length != 2<<20 {
		t.Fatalf("allocation of 1 MiB at 2 MiB granularity: %+v", a)
	}
	h := a.Handle
	h.Offset, h.Length = 1<<20, 4096
	if err := d.Import(ctx, 1, h); err != nil {
		t.Fatal(err)
	}
}

// TestCopyFails: a copy the driver fails (the fake's hook: an illegal
// address, reported by the event) is StatusIO; the next copy works.
func TestCopyFails(t *testing.T) {
	ctx := context.Background()
	d := start(t, "")
	a, err := d.Allocate(ctx, 0, 8192)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Import(ctx, 1, a.Handle); err != nil {
		t.Fatal(err)
	}
	if err := d.RegisterHost(ctx, sdk.Region{ID: 2, Mem: fakelib.HostMem(t, 8192)}); err != nil {
		t.Fatal(err)
	}
	ch, done := collect()
	t.Setenv("FAKECUDA_FAIL_LEN", "1234")
	d.Copy(sdk.DeviceCopy{Token: 5, Src: sdk.MemRef{Region: 2}, Dst: sdk.MemRef{Region: 1}, Length: 1234}, done)
	if o := waitFor(t, ch, 5); o.st != ring.StatusIO {
		t.Fatalf("failing copy: %+v, want StatusIO", o)
	}
	d.Copy(sdk.DeviceCopy{Token: 6, Src: sdk.MemRef{Region: 2}, Dst: sdk.MemRef{Region: 1}, Length: 1235}, done)
	if o := waitFor(t, ch, 6); o.st != ring.StatusOK {
		t.Fatalf("copy after a failed one: %+v", o)
	}
}

// TestImportLegacyIPC opens a legacy IPC handle (cuda-ipc, cudaMalloc
// memory) exported by another process, at two offsets sharing one open,
// and then, once the exporter freed it, fails with ErrStaleHandle.
func TestImportLegacyIPC(t *testing.T) {
	ctx := context.Background()
	const size = 65536
	x := fakelib.StartExporter(t, exporter, size)
	h := sdk.Handle{Type: sdk.HandleCUDAIPC, Device: 0, Data: x.Handle, Size: size}

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
	ch, done := collect()
	d.Copy(sdk.DeviceCopy{Token: 1, Src: sdk.MemRef{Region: 2}, Dst: sdk.MemRef{Region: 10}, Length: 3000}, done)
	if o := waitFor(t, ch, 1); o.st != ring.StatusOK || !bytes.Equal(host[:3000], whole[1000:4000]) {
		t.Fatalf("copy from region at offset 1000: %+v", o)
	}
	for _, id := range []uint32{1, 2} {
		if err := d.Unimport(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	x.Free(t)
	if err := d.Import(ctx, 3, h1); !errors.Is(err, sdk.ErrStaleHandle) {
		t.Fatalf("Import after the exporter freed: %v, want ErrStaleHandle", err)
	}
}

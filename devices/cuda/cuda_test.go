package cuda_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/ferrydev/ferry/devices/cuda"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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

package host_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/internal/cpuslice"
)

// TestEngineHoldsCPUSlice: an engine on its defaults asks for a 100 µs
// slice on its process's threads (transfer.cpu_slice) and returns them
// to the kernel's default at Close; cpu_slice = 0 leaves them alone.
// Not parallel: the slice is the process's, and every engine alive
// holds it.
func TestEngineHoldsCPUSlice(t *testing.T) {
	before, err := cpuslice.Current()
	if err != nil {
		t.Fatal(err)
	}
	if before == config.DefaultCPUSlice {
		t.Fatalf("the slice reads %v before any engine started: one was left held", before)
	}
	if err := cpuslice.Hold(time.Millisecond); errors.Is(err, cpuslice.ErrUnsupported) {
		t.Skipf("not measurable here: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	cpuslice.Release()
	start := func(name string, slice time.Duration) *host.Engine {
		cfg := config.Default(name)
		cfg.PluginDir = binDir
		cfg.Transfer.CPUSlice = slice
		e, err := host.New(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	off := start("slice-off", 0)
	if d, _ := cpuslice.Current(); d != before {
		t.Fatalf("cpu_slice = 0: the slice reads %v, want it left at %v", d, before)
	}
	off.Close()
	e := start("slice-on", config.DefaultCPUSlice)
	got, _ := cpuslice.Current()
	if got != config.DefaultCPUSlice {
		e.Close()
		t.Fatalf("while an engine runs the slice reads %v, want %v", got, config.DefaultCPUSlice)
	}
	e.Close()
	if d, _ := cpuslice.Current(); d != before {
		t.Fatalf("after Close the slice reads %v, want the default %v back", d, before)
	}
}

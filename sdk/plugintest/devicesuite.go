package plugintest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"testing"
	"time"
	"unsafe"

	"github.com/ferrydev/ferry/internal/pluginclient"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
	"github.com/ferrydev/ferry/sdk/shm"
)

// DeviceConfig says which device plugin RunDevice tests and how.
type DeviceConfig struct {
	// Binary is the device plugin executable.
	Binary string
	// Config is the HCL config body Start gets.
	Config []byte
	// Open, when set, maps a handle the plugin exported in this process
	// (simmem.Open for HandleSim), so that the suite also checks the
	// bytes in device memory itself rather than only through copies back
	// to the host. close unmaps it.
	Open func(h sdk.Handle) (mem []byte, close func() error, err error)
	// AllocSize is the size of each test allocation; default 1 MiB.
	AllocSize uint64
}

// Region ids RunDevice uses: host regions and device imports share the
// plugin's region space.
const (
	devHostSrc = 1  // host: the bytes to copy to the device
	devHostDst = 2  // host: where they come back
	devImportA = 10 // device: allocation A
	devImportB = 11 // device: allocation B
)

// RunDevice runs the device conformance suite against c.Binary, as a host
// drives a device plugin: Describe, Probe and Devices; allocations,
// identified, imported and copied host to device, device to device and
// device to host with the bytes verified; and each refusal the contract
// names (a freed allocation's handle, a device it does not drive, memory
// that is not a device's, a copy out of bounds), then Stop.
func RunDevice(t *testing.T, c DeviceConfig) {
	size := c.AllocSize
	if size == 0 {
		size = 1 << 20
	}
	ctx := t.Context()
	p := LaunchDevice(t, c.Binary)
	dc := p.Client

	info, err := dc.Describe(ctx)
	if err != nil {
		t.Fatalf("describe: %v", err)
	}
	if info.Name == "" || info.Kind == "" || len(info.Handles) == 0 {
		t.Fatalf("describe: %+v: a device plugin names itself, its memory kind and the handles it takes", info)
	}
	// Started before Probe, as the host does: the config may name the
	// driver, and Probe answers for what Start configured.
	serr := dc.Start(ctx, sdk.StartConfig{Engine: "device-conformance", MachineID: "plugintest", Config: c.Config, ConfigFile: "device.hcl", ConfigLine: 1, ConfigColumn: 1})
	pr, err := dc.Probe(ctx)
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	if !pr.Available {
		t.Skipf("device plugin %s unavailable on this machine: %s", c.Binary, pr.Reason)
	}
	if serr != nil {
		t.Fatalf("start: %v", serr)
	}
	devs, err := dc.Devices(ctx)
	if err != nil {
		t.Fatalf("devices: %v", err)
	}
	if len(devs) == 0 {
		t.Fatal("devices: none listed by an available plugin")
	}
	for i, d := range devs {
		if d.Index != i {
			t.Fatalf("devices: entry %d has index %d; devices are listed in index order", i, d.Index)
		}
	}
	last := len(devs) - 1 // B goes on another device when there is one

	a, err := dc.Allocate(ctx, 0, size)
	if err != nil {
		t.Fatalf("allocate %d bytes on device 0: %v", size, err)
	}
	b, err := dc.Allocate(ctx, last, size)
	if err != nil {
		t.Fatalf("allocate %d bytes on device %d: %v", size, last, err)
	}
	if a.Device != 0 || b.Device != last || a.Size != size || a.Handle.Check() != nil {
		t.Fatalf("allocations %+v and %+v do not say what was asked", a, b)
	}
	src := deviceHostRegion(t, dc, devHostSrc, size)
	dst := deviceHostRegion(t, dc, devHostDst, size)
	fill(src.Mem(), 7)

	t.Run("Identify", func(t *testing.T) {
		id, err := dc.Identify(ctx, os.Getpid(), a.Addr+4096, 8192)
		if err != nil {
			t.Fatalf("identify inside allocation A: %v", err)
		}
		h := id.Handle
		if id.Device != 0 || h.Offset != 4096 || h.Length != 8192 || h.Size != size || h.Check() != nil {
			t.Fatalf("identify [A+4096, +8192): device %d handle %+v, want device 0, offset 4096, length 8192, size %d", id.Device, h, size)
		}
	})
	t.Run("CopyRoundTrip", func(t *testing.T) {
		mustImport(t, dc, devImportA, a.Handle)
		mustImport(t, dc, devImportB, b.Handle)
		// Host to device, device to device, device to host, at an
		// unaligned offset and whole.
		for _, r := range []struct{ off, n uint64 }{{0, size}, {12345, 54321}} {
			res := mustCopy(t, dc,
				sdk.DeviceCopy{Src: sdk.MemRef{Region: devHostSrc, Offset: r.off}, Dst: sdk.MemRef{Region: devImportA, Offset: r.off}, Length: r.n})
			checkCopied(t, "host to device", res, r.n)
			if c.Open != nil {
				mem, closeMem, err := c.Open(a.Handle)
				if err != nil {
					t.Fatalf("open allocation A's handle here: %v", err)
				}
				same := bytes.Equal(mem[r.off:r.off+r.n], src.Mem()[r.off:r.off+r.n])
				closeMem()
				if !same {
					t.Fatalf("host to device [%d, +%d): device memory differs from the host's", r.off, r.n)
				}
			}
			res = mustCopy(t, dc,
				sdk.DeviceCopy{Src: sdk.MemRef{Region: devImportA, Offset: r.off}, Dst: sdk.MemRef{Region: devImportB, Offset: r.off}, Length: r.n})
			checkCopied(t, "device to device", res, r.n)
			clear(dst.Mem())
			res = mustCopy(t, dc,
				sdk.DeviceCopy{Src: sdk.MemRef{Region: devImportB, Offset: r.off}, Dst: sdk.MemRef{Region: devHostDst, Offset: r.off}, Length: r.n})
			checkCopied(t, "device to host", res, r.n)
			if !bytes.Equal(dst.Mem()[r.off:r.off+r.n], src.Mem()[r.off:r.off+r.n]) {
				t.Fatalf("[%d, +%d) came back through two devices changed", r.off, r.n)
			}
		}
	})
	t.Run("Batch", func(t *testing.T) {
		// Many copies in one call, each its own 4 KiB; each answers.
		var batch []sdk.DeviceCopy
		for i := uint64(0); i < 64; i++ {
			batch = append(batch, sdk.DeviceCopy{Token: i, Src: sdk.MemRef{Region: devHostSrc, Offset: i * 4096}, Dst: sdk.MemRef{Region: devImportA, Offset: i * 4096}, Length: 4096})
		}
		res := mustCopy(t, dc, batch...)
		for i, r := range res {
			if r.Status != ring.StatusOK || r.Bytes != 4096 {
				t.Fatalf("copy %d of a batch: %v, %d bytes", i, r.Status, r.Bytes)
			}
		}
	})
	t.Run("OutOfBounds", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			c    sdk.DeviceCopy
		}{
			{"past the device range", sdk.DeviceCopy{Src: sdk.MemRef{Region: devHostSrc}, Dst: sdk.MemRef{Region: devImportA, Offset: size - 10}, Length: 11}},
			{"past the host range", sdk.DeviceCopy{Src: sdk.MemRef{Region: devHostSrc, Offset: size}, Dst: sdk.MemRef{Region: devImportA}, Length: 1}},
			{"offset overflow", sdk.DeviceCopy{Src: sdk.MemRef{Region: devHostSrc, Offset: ^uint64(0)}, Dst: sdk.MemRef{Region: devImportA}, Length: 2}},
			{"unknown region", sdk.DeviceCopy{Src: sdk.MemRef{Region: 99}, Dst: sdk.MemRef{Region: devImportA}, Length: 1}},
		} {
			res := mustCopy(t, dc, tc.c)
			if res[0].Status != ring.StatusInvalid || res[0].Bytes != 0 {
				t.Errorf("copy %s: %v, %d bytes; want %v, 0 bytes", tc.name, res[0].Status, res[0].Bytes, ring.StatusInvalid)
			}
		}
	})
	t.Run("NotDevice", func(t *testing.T) {
		// This process is not the plugin's: one that cannot look into
		// another process's pointers says so (the contract's
		// ErrCannotIdentify: a CUDA pointer is known only to its own
		// process); one that can must not take a Go slice for its own.
		host := make([]byte, 4096)
		if _, err := dc.Identify(ctx, os.Getpid(), addrOf(host), uint64(len(host))); !errors.Is(err, sdk.ErrNotDevice) && !errors.Is(err, sdk.ErrCannotIdentify) {
			t.Errorf("identify of a Go slice: %v, want ErrNotDevice or ErrCannotIdentify", err)
		}
		if _, err := dc.Identify(ctx, os.Getpid(), a.Addr+size-100, 200); !errors.Is(err, sdk.ErrNotDevice) {
			t.Errorf("identify of a range that runs past its allocation's end: %v, want ErrNotDevice", err)
		}
	})
	t.Run("NoDevice", func(t *testing.T) {
		h := a.Handle
		h.Device = len(devs)
		if err := dc.Import(ctx, 20, h); !errors.Is(err, sdk.ErrNoDevice) {
			t.Errorf("import of a handle of device %d (of %d): %v, want ErrNoDevice", h.Device, len(devs), err)
		}
		if _, err := dc.Allocate(ctx, len(devs), 4096); !errors.Is(err, sdk.ErrNoDevice) {
			t.Errorf("allocate on device %d (of %d): %v, want ErrNoDevice", len(devs), len(devs), err)
		}
	})
	t.Run("FreeStales", func(t *testing.T) {
		if err := dc.Free(ctx, b.Addr); err != nil {
			t.Fatalf("free allocation B: %v", err)
		}
		if err := dc.Import(ctx, 21, b.Handle); !errors.Is(err, sdk.ErrStaleHandle) {
			t.Fatalf("import of a freed allocation's handle: %v, want ErrStaleHandle", err)
		}
		if c.Open != nil {
			if _, _, err := c.Open(b.Handle); !errors.Is(err, sdk.ErrStaleHandle) {
				t.Errorf("open here of a freed allocation's handle: %v, want ErrStaleHandle", err)
			}
		}
		// The import made before Free keeps its memory.
		clear(dst.Mem())
		checkCopied(t, "device to host from a freed allocation's import", mustCopy(t, dc,
			sdk.DeviceCopy{Src: sdk.MemRef{Region: devImportB}, Dst: sdk.MemRef{Region: devHostDst}, Length: size}), size)
		if !bytes.Equal(dst.Mem(), src.Mem()) {
			t.Fatal("an import made before Free lost its bytes")
		}
		if err := dc.Unimport(ctx, devImportB); err != nil {
			t.Fatalf("unimport: %v", err)
		}
		if res := mustCopy(t, dc, sdk.DeviceCopy{Src: sdk.MemRef{Region: devImportB}, Dst: sdk.MemRef{Region: devHostDst}, Length: 1}); res[0].Status != ring.StatusInvalid {
			t.Fatalf("copy from an unimported region: %v, want %v", res[0].Status, ring.StatusInvalid)
		}
	})
	t.Run("StopReleases", func(t *testing.T) {
		if err := dc.Stop(ctx); err != nil {
			t.Fatalf("stop: %v", err)
		}
		if res := mustCopy(t, dc, sdk.DeviceCopy{Src: sdk.MemRef{Region: devHostSrc}, Dst: sdk.MemRef{Region: devImportA}, Length: 1}); res[0].Status == ring.StatusOK {
			t.Fatal("a copy after Stop ran")
		}
		if c.Open != nil {
			if _, _, err := c.Open(a.Handle); !errors.Is(err, sdk.ErrStaleHandle) {
				t.Errorf("open here of an allocation after Stop: %v, want ErrStaleHandle", err)
			}
		}
	})
}

// LaunchDevice starts the device plugin binary as a host does; the test's
// cleanup kills it.
func LaunchDevice(t testing.TB, binary string) *pluginclient.DeviceProcess {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	img, err := pluginclient.OpenImage(binary)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	p, err := pluginclient.LaunchDevice(ctx, img, nil)
	if err != nil {
		t.Fatalf("launch device plugin %s: %v", binary, err)
	}
	t.Cleanup(p.Kill)
	return p
}

// deviceHostRegion makes a host region of size bytes and registers it.
func deviceHostRegion(t *testing.T, dc *pluginclient.DeviceClient, id uint32, size uint64) *shm.Region {
	t.Helper()
	r, err := shm.Create("plugintest-device-host", int(size))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if err := dc.RegisterHost(t.Context(), id, r.FD(), 0, size); err != nil {
		t.Fatalf("register host region %d: %v", id, err)
	}
	return r
}

func mustImport(t *testing.T, dc *pluginclient.DeviceClient, id uint32, h sdk.Handle) {
	t.Helper()
	if err := dc.Import(t.Context(), id, h); err != nil {
		t.Fatalf("import region %d: %v", id, err)
	}
}

func mustCopy(t *testing.T, dc *pluginclient.DeviceClient, copies ...sdk.DeviceCopy) []pluginclient.CopyResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), completionWait)
	defer cancel()
	res, err := dc.Copy(ctx, copies)
	if err != nil {
		t.Fatalf("copy: %v", err)
	}
	if len(res) != len(copies) {
		t.Fatalf("copy: %d results for %d copies", len(res), len(copies))
	}
	return res
}

func checkCopied(t *testing.T, what string, res []pluginclient.CopyResult, n uint64) {
	t.Helper()
	if res[0].Status != ring.StatusOK || res[0].Bytes != n {
		t.Fatalf("%s of %d bytes: %v, %d bytes", what, n, res[0].Status, res[0].Bytes)
	}
}

// addrOf is b's address in this process, for Identify.
func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&b[0]))) }

package plugintest_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
)

// TestSealedRegionContract: a sealed region (a memfd sealed with
// F_SEAL_FUTURE_WRITE after the host mapped it writable) reaches a
// transport that takes foreign memory as a Region with Mem mapped
// read-only, FD the sealed file, and Foreign the host's writable mapping;
// Describe says sealed_regions exactly when the transport takes foreign
// memory, and one that does not is refused the region with a message
// that says why.
func TestSealedRegionContract(t *testing.T) {
	ctx := context.Background()
	page := os.Getpagesize()
	fd, err := unix.MemfdCreate("sealed-test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(page)); err != nil {
		t.Fatal(err)
	}
	host, err := unix.Mmap(fd, 0, page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(host)
	copy(host, "sealed bytes")
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_FUTURE_WRITE); err != nil {
		t.Fatal(err)
	}
	addr := uint64(uintptr(unsafe.Pointer(&host[0])))
	var got []sdk.Region
	mock := func(foreign bool) *plugintest.Mock {
		return &plugintest.Mock{
			DescribeFunc: func(context.Context) (sdk.Info, error) { return sdk.Info{Name: "mock", ForeignMemory: foreign}, nil },
			RegisterMemoryFunc: func(_ context.Context, r sdk.Region) error {
				got = append(got, r)
				return nil
			},
		}
	}

	c := plugintest.Connect(t, mock(true), 0)
	if d, err := c.Describe(ctx); err != nil || !d.SealedRegions {
		t.Fatalf("describe: %+v, %v; want SealedRegions", d, err)
	}
	if err := c.RegisterSealed(ctx, 3, fd, uint64(page), sdk.PermRemoteRead, sdk.MemoryCPU, os.Getpid(), addr); err != nil {
		t.Fatal(err)
	}
	want := sdk.Foreign{PID: os.Getpid(), Addr: addr, Length: uint64(page)}
	if len(got) != 1 || got[0].Foreign == nil || *got[0].Foreign != want || got[0].FD <= 0 || len(got[0].Mem) != page {
		t.Fatalf("the transport got %+v; want region 3 mapped, with its fd and foreign %+v", got, want)
	}
	if !bytes.HasPrefix(got[0].Mem, []byte("sealed bytes")) {
		t.Fatal("the mapping does not show the host's bytes")
	}
	host[0] = 'S' // the host's mapping stays writable, and shared
	if got[0].Mem[0] != 'S' {
		t.Fatal("the plugin's mapping does not show the host's write")
	}
	if err := c.UnregisterMemory(ctx, 3); err != nil {
		t.Fatal(err)
	}

	// A transport that writes only what it maps cannot take one.
	c = plugintest.Connect(t, mock(false), 0)
	if d, err := c.Describe(ctx); err != nil || d.SealedRegions {
		t.Fatalf("describe: %+v, %v; want no SealedRegions", d, err)
	}
	err = c.RegisterSealed(ctx, 4, fd, uint64(page), sdk.PermRemoteRead, sdk.MemoryCPU, os.Getpid(), addr)
	if err == nil || !strings.Contains(err.Error(), "sealed region cannot be mapped writable") {
		t.Errorf("a sealed region to a transport without foreign memory: %v", err)
	}
	if len(got) != 1 {
		t.Errorf("the transport saw a refused region: %+v", got[1:])
	}
}

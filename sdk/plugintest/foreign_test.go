package plugintest_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
)

// TestForeignRegionContract: memory the application allocated itself
// reaches a transport as a Region with Foreign set and nothing mapped,
// only when the transport declares Info.ForeignMemory, and only after the
// SDK could read the range's ends; a protocol-1 server never advertises
// the capability.
func TestForeignRegionContract(t *testing.T) {
	ctx := context.Background()
	mem := make([]byte, 4096)
	addr := uint64(uintptr(unsafe.Pointer(&mem[0])))
	var got []sdk.Region
	mock := func(foreign bool) *plugintest.Mock {
		return &plugintest.Mock{
			DescribeFunc: func(context.Context) (sdk.Info, error) {
				return sdk.Info{Name: "mock", ForeignMemory: foreign}, nil
			},
			RegisterMemoryFunc: func(_ context.Context, r sdk.Region) error {
				got = append(got, r)
				return nil
			},
		}
	}

	c := plugintest.Connect(t, mock(true), 0)
	d, err := c.Describe(ctx)
	if err != nil || !d.ForeignMemory {
		t.Fatalf("describe: %+v, %v; want ForeignMemory", d, err)
	}
	if err := c.RegisterForeign(ctx, 5, os.Getpid(), addr, 4096, sdk.PermRemoteRead, sdk.MemoryCPU); err != nil {
		t.Fatal(err)
	}
	want := sdk.Foreign{PID: os.Getpid(), Addr: addr, Length: 4096}
	if len(got) != 1 || got[0].ID != 5 || got[0].Mem != nil || got[0].FD != -1 || got[0].Foreign == nil || *got[0].Foreign != want ||
		got[0].Perm != sdk.PermRemoteRead || got[0].Len() != 4096 {
		t.Fatalf("the transport got %+v, want region 5 foreign %+v, nothing mapped", got, want)
	}
	if err := c.RegisterForeign(ctx, 5, os.Getpid(), addr, 4096, sdk.PermLocal, sdk.MemoryCPU); err == nil || !strings.Contains(err.Error(), "already registered") {
		t.Errorf("region 5 again: %v", err)
	}
	if err := c.UnregisterMemory(ctx, 5); err != nil {
		t.Fatal(err)
	}

	// A range whose end is not mapped is refused before the transport
	// sees it: the failure is at Register, never at a transfer.
	page := os.Getpagesize()
	m, err := unix.Mmap(-1, 0, 2*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.MunmapPtr(unsafe.Pointer(&m[0]), uintptr(page))
	if err := unix.MunmapPtr(unsafe.Pointer(&m[page]), uintptr(page)); err != nil {
		t.Fatal(err)
	}
	err = c.RegisterForeign(ctx, 6, os.Getpid(), uint64(uintptr(unsafe.Pointer(&m[0]))), uint64(2*page), sdk.PermLocal, sdk.MemoryCPU)
	if err == nil || !strings.Contains(err.Error(), "cannot reach the memory") {
		t.Errorf("a range running into unmapped memory: %v", err)
	}
	if len(got) != 1 {
		t.Errorf("the transport saw a refused region: %+v", got[1:])
	}

	// A transport that maps memory never gets foreign memory.
	c = plugintest.Connect(t, mock(false), 0)
	err = c.RegisterForeign(ctx, 7, os.Getpid(), addr, 4096, sdk.PermLocal, sdk.MemoryCPU)
	if err == nil || !strings.Contains(err.Error(), "maps the memory it moves") || !strings.Contains(err.Error(), "allocate it through the engine") {
		t.Errorf("foreign memory to a transport without the capability: %v", err)
	}
	if len(got) != 1 {
		t.Errorf("the transport saw a refused region: %+v", got[1:])
	}

	// A host of protocol 1 is told nothing of the capability.
	d, err = plugintest.Connect(t, mock(true), 1).Describe(ctx)
	if err != nil || d.ForeignMemory {
		t.Errorf("protocol 1 describe: %+v, %v; want no ForeignMemory", d, err)
	}
}

// TestForeignLocalOnlyContract: Describe carries ForeignLocalOnly to the
// host with ForeignMemory, never without it (it qualifies it), and a
// protocol-1 host is told neither.
func TestForeignLocalOnlyContract(t *testing.T) {
	ctx := context.Background()
	mock := func(info sdk.Info) *plugintest.Mock {
		return &plugintest.Mock{DescribeFunc: func(context.Context) (sdk.Info, error) { return info, nil }}
	}
	for _, c := range []struct {
		info              sdk.Info
		protocol          int
		foreign, localOne bool
	}{
		{sdk.Info{Name: "shm-like", ForeignMemory: true, ForeignLocalOnly: true}, 0, true, true},
		{sdk.Info{Name: "tcp-like", ForeignMemory: true}, 0, true, false},
		{sdk.Info{Name: "confused", ForeignLocalOnly: true}, 0, false, false},
		{sdk.Info{Name: "shm-like", ForeignMemory: true, ForeignLocalOnly: true}, 1, false, false},
	} {
		d, err := plugintest.Connect(t, mock(c.info), c.protocol).Describe(ctx)
		if err != nil || d.ForeignMemory != c.foreign || d.ForeignLocalOnly != c.localOne {
			t.Errorf("%s over protocol %d: describe %+v, %v; want ForeignMemory %v, ForeignLocalOnly %v", c.info.Name, c.protocol, d.Info, err, c.foreign, c.localOne)
		}
	}
}

package pluginclient_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/ferrydev/ferry/internal/pluginclient"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
)

// RegisterDevice carries the handle whole to a DeviceImporter, Describe
// lists the interface, and UnregisterMemory forgets the region as any.
func TestRegisterDevice(t *testing.T) {
	type call struct {
		region uint32
		perm   sdk.Perm
		kind   sdk.MemoryKind
		h      sdk.Handle
	}
	var got []call
	var unregistered []uint32
	m := &plugintest.MockDeviceImporter{RegisterDeviceFunc: func(_ context.Context, region uint32, perm sdk.Perm, kind sdk.MemoryKind, h sdk.Handle) error {
		if h.Device == 7 {
			return fmt.Errorf("%w: allocation 9 was freed", sdk.ErrStaleHandle)
		}
		if h.Device == 8 {
			return fmt.Errorf("%w: device 8", sdk.ErrNoDevice)
		}
		got = append(got, call{region, perm, kind, h})
		return nil
	}}
	m.UnregisterMemoryFunc = func(_ context.Context, id uint32) error {
		unregistered = append(unregistered, id)
		return nil
	}
	c := plugintest.Connect(t, m, 0)
	d, err := c.Describe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !d.Implements(sdk.InterfaceDeviceImporter) {
		t.Fatalf("a device importer's Describe lists %q, want %q among them", d.Interfaces, sdk.InterfaceDeviceImporter)
	}
	h := sdk.Handle{Type: sdk.HandleCUDAIPC, Device: 1, Data: []byte{1, 2, 3}, Size: 1 << 20, Offset: 4096, Length: 8192}
	if err := c.RegisterDevice(t.Context(), 5, sdk.PermRemoteRead, sdk.MemoryCUDA, h); err != nil {
		t.Fatal(err)
	}
	want := []call{{5, sdk.PermRemoteRead, sdk.MemoryCUDA, h}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("transport saw %+v, want %+v", got, want)
	}
	err = c.RegisterDevice(t.Context(), 5, sdk.PermRemoteRead, sdk.MemoryCUDA, h)
	wantErr(t, err, "region 5 already registered")

	stale := h
	stale.Device = 7
	err = c.RegisterDevice(t.Context(), 6, sdk.PermLocal, sdk.MemoryCUDA, stale)
	wantErr(t, err, "allocation 9 was freed")
	if !errors.Is(err, sdk.ErrStaleHandle) {
		t.Fatalf("%v: not sdk.ErrStaleHandle", err)
	}
	nodev := h
	nodev.Device = 8
	if err := c.RegisterDevice(t.Context(), 6, sdk.PermLocal, sdk.MemoryCUDA, nodev); !errors.Is(err, sdk.ErrNoDevice) {
		t.Fatalf("%v: not sdk.ErrNoDevice", err)
	}
	// A refused registration leaves no region: the id is free again.
	if err := c.RegisterDevice(t.Context(), 6, sdk.PermLocal, sdk.MemoryCUDA, h); err != nil {
		t.Fatalf("register after a refused one: %v", err)
	}

	bad := h
	bad.Offset = bad.Size // the range is outside the allocation
	wantErr(t, c.RegisterDevice(t.Context(), 8, sdk.PermLocal, sdk.MemoryCUDA, bad), "outside its allocation")

	if err := c.UnregisterMemory(t.Context(), 5); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(unregistered, []uint32{5}) {
		t.Fatalf("unregistered %v, want [5]", unregistered)
	}
	wantErr(t, c.UnregisterMemory(t.Context(), 5), "not registered")
}

// A plugin without sdk.DeviceImporter (and one of protocol 1) says so
// in words, and the error matches ErrUnimplemented.
func TestRegisterDeviceUnimplemented(t *testing.T) {
	for _, protocol := range []int{2, 1} {
		c := plugintest.Connect(t, &plugintest.Mock{DescribeFunc: func(context.Context) (sdk.Info, error) { return sdk.Info{Name: "plain"}, nil }}, protocol)
		d, err := c.Describe(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if d.Implements(sdk.InterfaceDeviceImporter) {
			t.Fatalf("protocol %d: a plain Mock lists %q", protocol, d.Interfaces)
		}
		h := sdk.Handle{Type: sdk.HandleSim, Data: []byte{1}, Size: 10, Length: 10}
		err = c.RegisterDevice(t.Context(), 1, sdk.PermLocal, sdk.MemoryCUDA, h)
		wantErr(t, err, `plugin "plain" does not import device memory`)
		if !errors.Is(err, pluginclient.ErrUnimplemented) {
			t.Fatalf("protocol %d: %v does not match ErrUnimplemented", protocol, err)
		}
	}
}

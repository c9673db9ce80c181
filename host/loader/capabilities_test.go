package loader

import (
	"context"
	"slices"
	"testing"

	"github.com/ferrydev/ferry/plugins/fault"
	shmtransport "github.com/ferrydev/ferry/plugins/shm"
	"github.com/ferrydev/ferry/plugins/tcp"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
)

// The capabilities the host plans from, as this repository's plugins
// declare them, read through the host's client (in process).
func TestPluginCapabilities(t *testing.T) {
	ctx := context.Background()
	rw := []ring.Op{ring.OpWrite, ring.OpRead}

	c := plugintest.Connect(t, tcp.New(), 0)
	d, err := c.Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.Ops, rw) || d.MaxSlice != tcp.DefaultMaxFrame || d.PreferredSlice != 0 || d.SameMachineOnly || d.Protocol != sdk.ProtocolVersion {
		t.Errorf("tcp before Start: %+v, want writes and reads, MaxSlice = the default max_frame, no preference, protocol %d", d, sdk.ProtocolVersion)
	}
	// After Start, MaxSlice is the configured max_frame.
	if _, err := c.Start(ctx, sdk.StartConfig{Engine: "caps", Incarnation: 1, Config: []byte("listen = [\"127.0.0.1:0\"]\nmax_frame = \"1MiB\""), ConfigFile: "caps.hcl", ConfigLine: 1, ConfigColumn: 1}); err != nil {
		t.Fatal(err)
	}
	if d, err = c.Describe(ctx); err != nil {
		t.Fatal(err)
	}
	if d.MaxSlice != 1<<20 {
		t.Errorf("tcp with max_frame 1MiB: MaxSlice %d, want %d", d.MaxSlice, 1<<20)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	// fault wraps TCP and carries its capabilities.
	d, err = plugintest.Connect(t, fault.New(), 0).Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "fault" || !slices.Equal(d.Ops, rw) || d.MaxSlice != tcp.DefaultMaxFrame || d.SameMachineOnly {
		t.Errorf("fault: %+v, want TCP's capabilities under the name fault", d)
	}

	d, err = plugintest.Connect(t, shmtransport.New(), 0).Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.Ops, rw) || d.MaxSlice != 0 || d.PreferredSlice != 64<<20 || !d.SameMachineOnly {
		t.Errorf("shm: %+v, want writes and reads, no MaxSlice, PreferredSlice 64 MiB, same machine only", d)
	}
}

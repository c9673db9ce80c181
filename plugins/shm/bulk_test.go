package shm_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/plugins/shm"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
)

// TestBulkNice: with bulk_nice, low-priority copies run on the nice
// workers (copies_bulk), whose threads are at that niceness, and every
// other copy as before; with bulk_nice = 0 nothing runs nice. Bytes are
// verified either way.
func TestBulkNice(t *testing.T) {
	nice := plugintest.BulkNice(t)
	const size = 8 << 20
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("on=%v", on), func(t *testing.T) {
			cfg := fmt.Sprintf("copy_workers = 2\nbulk_nice = %d", nice)
			if !on {
				cfg = "copy_workers = 2\nbulk_nice = 0"
			}
			a, local, rw := writePair(t, cfg, size)
			for i, c := range []struct {
				prio sdk.Priority
				n    uint64
				bulk uint64 // copies_bulk after it
			}{
				{sdk.PriorityLow, 4 << 20, 1},
				{sdk.PriorityLow, 1 << 20, 2}, // within inline_max: still the nice workers'
				{sdk.PriorityLow, 4 << 10, 2}, // small: inline
				{sdk.PriorityHigh, 4 << 20, 2},
				{sdk.PriorityNormal, 1 << 20, 2},
			} {
				fill(local[:c.n], uint64(i+1))
				got := a.do(t, ring.Descriptor{Op: ring.OpWrite, Prio: uint8(c.prio), LocalRegion: 1, Peer: 1, RemoteRegion: 1, Length: c.n})
				if got.Status != ring.StatusOK || got.N != c.n {
					t.Fatalf("%v write of %d: %v, %d bytes", c.prio, c.n, got.Status, got.N)
				}
				plugintest.MustEqual(t, "written", rw[:c.n], local[:c.n])
				want := c.bulk
				if !on {
					want = 0
				}
				if s := a.stats(t); s["copies_bulk"] != want {
					t.Errorf("after a %v write of %d: copies_bulk %d, want %d", c.prio, c.n, s["copies_bulk"], want)
				}
			}
			// The nice pool's two workers, and nothing else, run at nice.
			want := 2
			if !on {
				want = 0
			}
			if got := plugintest.NiceThreads(nice); got != want {
				t.Errorf("%d threads at niceness %d, want %d (the nice pool's workers)", got, nice, want)
			}
		})
	}
	// Stopped, the workers are gone: no thread stays nice.
	if got := plugintest.NiceThreads(nice); got != 0 {
		t.Errorf("after Stop %d threads stay at niceness %d", got, nice)
	}
}

func TestBulkNiceConfig(t *testing.T) {
	for _, cfg := range []string{"bulk_nice = 20", "bulk_nice = -1"} {
		tr := shm.New(shm.WithLogger(hclog.NewNullLogger()))
		_, err := tr.Start(t.Context(), sdk.StartConfig{Engine: "x", MachineID: machine, Config: []byte(cfg), ConfigFile: "f.hcl", ConfigLine: 3, ConfigColumn: 1})
		if err == nil || !strings.Contains(err.Error(), "f.hcl:3:") || !strings.Contains(err.Error(), "bulk_nice") {
			t.Errorf("config %q: error %v, want one naming bulk_nice at f.hcl:3", cfg, err)
		}
		tr.Stop(t.Context())
	}
}

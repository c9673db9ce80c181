package pluginclient_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/ferrydev/ferry/internal/pluginclient"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/shm"
)

// regionLog is a mock transport's record of what it holds.
type regionLog struct {
	mu      sync.Mutex
	held    map[uint32]sdk.Region
	calls   int // RegisterMemory calls
	refuse  uint32
	removed []uint32
}

func (l *regionLog) mock() *plugintest.Mock {
	return &plugintest.Mock{
		RegisterMemoryFunc: func(_ context.Context, r sdk.Region) error {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.calls++
			if r.ID == l.refuse {
				return errors.New("refused")
			}
			l.held[r.ID] = r
			return nil
		},
		UnregisterMemoryFunc: func(_ context.Context, id uint32) error {
			l.mu.Lock()
			defer l.mu.Unlock()
			delete(l.held, id)
			l.removed = append(l.removed, id)
			return nil
		},
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// memfds returns n memfds of two pages each, every byte set to its
// memfd's number and page.
func memfds(t *testing.T, n int) []*shm.Region {
	t.Helper()
	out := make([]*shm.Region, n)
	for i := range out {
		r, err := shm.Create("batch", 8192)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		for j := range r.Mem() {
			r.Mem()[j] = byte(i*2 + j/4096)
		}
		out[i] = r
	}
	return out
}

// batchOf is two regions per memfd, ids from first.
func batchOf(mfds []*shm.Region, first uint32) []pluginclient.Region {
	var regs []pluginclient.Region
	for i, m := range mfds {
		for page := range 2 {
			regs = append(regs, pluginclient.Region{ID: first + uint32(2*i+page), FD: m.FD(), Offset: uint64(page) * 4096, Length: 4096, Perm: sdk.PermRemoteReadWrite, Kind: sdk.MemoryCPU})
		}
	}
	return regs
}

// One batch of 600 regions over 300 memfds: more fds than one message
// carries, each memfd sent once, every region mapped onto its bytes.
func TestRegisterMemoryBatch(t *testing.T) {
	log := &regionLog{held: map[uint32]sdk.Region{}}
	c := plugintest.Connect(t, log.mock(), 2)
	d, err := c.Describe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !d.RegisterBatch {
		t.Fatal("a plugin built with this SDK does not say it takes batches")
	}
	mfds := memfds(t, 300) // > shm.MaxFDs
	regs := batchOf(mfds, 1)
	before := openFDs(t)
	if err := c.RegisterMemoryBatch(t.Context(), regs); err != nil {
		t.Fatal(err)
	}
	if len(log.held) != 600 || log.calls != 600 {
		t.Fatalf("the transport holds %d regions after %d calls, want 600", len(log.held), log.calls)
	}
	for i, r := range regs {
		got := log.held[r.ID]
		if got.Perm != r.Perm || got.Kind != r.Kind || got.FDOffset != r.Offset || !bytes.Equal(got.Mem, bytes.Repeat([]byte{byte(i)}, 4096)) {
			t.Fatalf("region %d arrived as perm %v kind %q offset %d, bytes %d..., want its memfd's page", r.ID, got.Perm, got.Kind, got.FDOffset, got.Mem[0])
		}
		if i%2 == 1 && got.FD != log.held[r.ID-1].FD {
			t.Fatalf("regions %d and %d of one memfd hold fds %d and %d: the memfd was sent twice", r.ID-1, r.ID, log.held[r.ID-1].FD, got.FD)
		}
	}
	if n := openFDs(t) - before; n != 300 {
		t.Fatalf("the plugin side holds %d more fds, want one per memfd (300)", n)
	}

	ids := make([]uint32, 0, len(regs)+1)
	for _, r := range regs {
		ids = append(ids, r.ID)
	}
	err = c.UnregisterMemoryBatch(t.Context(), append(ids, 5000))
	wantErr(t, err, "1 of 601 regions not unregistered", "region 5000", "not registered")
	if len(log.held) != 0 {
		t.Fatalf("the transport still holds %d regions", len(log.held))
	}
	if n := openFDs(t) - before; n != 0 {
		t.Fatalf("%d fds left open after every region was unregistered", n)
	}
}

// A refusal in the middle of a batch leaves nothing registered, in the
// transport or in the SDK's table, on either path: the batch RPC, and
// region by region for a plugin without it.
func TestRegisterMemoryBatchAllOrNothing(t *testing.T) {
	for _, protocol := range []int{2, 1} { // 1: Describe says no batches
		log := &regionLog{held: map[uint32]sdk.Region{}, refuse: 150}
		c := plugintest.Connect(t, log.mock(), protocol)
		if _, err := c.Describe(t.Context()); err != nil {
			t.Fatal(err)
		}
		regs := batchOf(memfds(t, 100), 100) // ids 100..299; 150 is refused
		before := openFDs(t)
		wantErr(t, c.RegisterMemoryBatch(t.Context(), regs), "region 150", "refused")
		if len(log.held) != 0 {
			t.Fatalf("protocol %d: the transport holds %d regions after a refused batch", protocol, len(log.held))
		}
		slices.Sort(log.removed)
		for i, id := range log.removed {
			if id != uint32(100+i) {
				t.Fatalf("protocol %d: unregistered %v, want 100..149", protocol, log.removed)
			}
		}
		if len(log.removed) != 50 {
			t.Fatalf("protocol %d: unregistered %d regions, want the 50 taken before the refusal", protocol, len(log.removed))
		}
		if n := openFDs(t) - before; n != 0 {
			t.Fatalf("protocol %d: %d fds left open after a refused batch", protocol, n)
		}
		// The SDK's table holds none of them either: they register again.
		log.refuse = 0
		if err := c.RegisterMemoryBatch(t.Context(), regs); err != nil {
			t.Fatalf("protocol %d: the same batch after the refusal: %v", protocol, err)
		}
	}
}

func TestRegisterMemoryBatchRefusesBadRegions(t *testing.T) {
	log := &regionLog{held: map[uint32]sdk.Region{}}
	c := plugintest.Connect(t, log.mock(), 2)
	if _, err := c.Describe(t.Context()); err != nil {
		t.Fatal(err)
	}
	m := memfds(t, 1)
	if err := c.RegisterMemory(t.Context(), 7, m[0].FD(), 0, 4096, sdk.PermLocal, sdk.MemoryCPU); err != nil {
		t.Fatal(err)
	}
	good := pluginclient.Region{ID: 1, FD: m[0].FD(), Length: 4096, Perm: sdk.PermLocal, Kind: sdk.MemoryCPU}
	with := func(f func(*pluginclient.Region)) []pluginclient.Region {
		bad := good
		bad.ID = 2
		f(&bad)
		return []pluginclient.Region{good, bad}
	}
	wantErr(t, c.RegisterMemoryBatch(t.Context(), with(func(r *pluginclient.Region) { r.ID = 7 })), "region 7 already registered")
	wantErr(t, c.RegisterMemoryBatch(t.Context(), with(func(r *pluginclient.Region) { r.ID = 1 })), "region 1 listed twice")
	wantErr(t, c.RegisterMemoryBatch(t.Context(), with(func(r *pluginclient.Region) { r.Length = 0 })), "region 2", "bad range")
	wantErr(t, c.RegisterMemoryBatch(t.Context(), with(func(r *pluginclient.Region) { r.Perm = 0 })), "region 2", "unknown permission")
	wantErr(t, c.RegisterMemoryBatch(t.Context(), with(func(r *pluginclient.Region) { r.Offset = 8192 })), "region 2")
	if len(log.held) != 1 {
		t.Fatalf("the transport holds %d regions, want only region 7", len(log.held))
	}
}

package localmem

import (
	"context"
	"errors"
	"testing"

	"github.com/ferrydev/ferry/host/segment"
	"github.com/ferrydev/ferry/sdk"
)

// batchFake takes batches; calls counts its calls of either kind.
type batchFake struct {
	*fakePlugin
	calls int
}

func (f *batchFake) RegisterMemoryBatch(ctx context.Context, regs []Registration) error {
	f.calls++
	if f.refuse {
		return errors.New("refused")
	}
	for _, r := range regs {
		f.regions[r.Region] = r.Off
	}
	return nil
}

func (f *batchFake) UnregisterMemoryBatch(_ context.Context, ids []uint32) error {
	f.calls++
	for _, id := range ids {
		delete(f.regions, id)
	}
	return nil
}

func TestRegisterBatch(t *testing.T) {
	ctx := context.Background()
	tb, mem := allocTable(t, "t", 1<<20)
	p := Addr(mem)
	single, batch := newFake("single"), &batchFake{fakePlugin: newFake("batch")}
	plugins := []Plugin{single, batch}
	if err := tb.Register(ctx, p+100*4096, 4096, sdk.PermLocal, plugins); err != nil { // region 1
		t.Fatal(err)
	}
	// 200 buffers given in reverse order, around the one registered.
	var rs []Range
	for i := 199; i >= 0; i-- {
		if i != 100 {
			rs = append(rs, Range{P: p + uintptr(i)*4096, N: 4096, Perm: sdk.PermRemoteReadWrite})
		}
	}
	if err := tb.RegisterBatch(ctx, rs, plugins); err != nil {
		t.Fatal(err)
	}
	if batch.calls != 1 || len(batch.regions) != 200 || len(single.regions) != 200 {
		t.Fatalf("batch plugin: %d calls, %d regions; single: %d regions; want 1 call and 200 regions each", batch.calls, len(batch.regions), len(single.regions))
	}
	bufs := tb.Buffers()
	for i, b := range bufs {
		if b.Base != uint64(p)+uint64(i)*4096 {
			t.Fatalf("buffer %d at %#x: the table is not sorted", i, b.Base)
		}
	}
	// Ids follow the caller's order: rs[0] (the highest address) is 2.
	if r, off, ok := tb.Lookup(uint64(p)+199*4096+5, 10); !ok || r != 2 || off != 5 {
		t.Fatalf("Lookup of the last buffer = %d, %d, %v; want region 2 offset 5", r, off, ok)
	}
	// Region 2 is remotely writable: carved into a memfd of its own, as
	// Register carves (carve.go), so the plugin gets it at offset 0.
	if single.regions[2] != 0 {
		t.Fatalf("plugin got region 2 at offset %d, want 0 of its own memfd", single.regions[2])
	}

	// A restarted plugin that takes batches gets every region in one call.
	fresh := &batchFake{fakePlugin: newFake("fresh")}
	if err := tb.Replay(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if fresh.calls != 1 || len(fresh.regions) != 200 || fresh.regions[2] != 0 || fresh.regions[1] != 100*4096 {
		t.Fatalf("replay: %d calls, %d regions (region 2 at %d, region 1 at %d); want 1 call, 200 regions, carved region 2 at 0, local-only region 1 at %d",
			fresh.calls, len(fresh.regions), fresh.regions[2], fresh.regions[1], 100*4096)
	}

	bases := make([]uint64, 0, len(rs))
	for _, r := range rs {
		bases = append(bases, uint64(r.P))
	}
	if _, err := tb.RemoveBatch(append(bases[:3:3], uint64(p)+1)); !errors.Is(err, ErrNotRegistered) || len(tb.Buffers()) != 200 {
		t.Fatalf("RemoveBatch with an unknown base: %v, %d left; want ErrNotRegistered and nothing removed", err, len(tb.Buffers()))
	}
	if _, err := tb.RemoveBatch([]uint64{bases[0], bases[0]}); !errors.Is(err, ErrInvalid) || len(tb.Buffers()) != 200 {
		t.Fatalf("RemoveBatch of a base twice: %v, %d left; want ErrInvalid and nothing removed", err, len(tb.Buffers()))
	}
	gone, err := tb.RemoveBatch(bases)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]uint32, len(gone))
	for i, b := range gone {
		ids[i] = b.Region
	}
	tb.UnregisterBatch(ctx, ids, plugins, func(p Plugin, err error) { t.Errorf("plugin %s: %v", p.Name(), err) })
	if left := tb.Buffers(); len(left) != 1 || left[0].Region != 1 || len(single.regions) != 1 || len(batch.regions) != 1 || batch.calls != 2 {
		t.Fatalf("after UnregisterBatch: table %v, plugins hold %d and %d (%d batch calls); want region 1 alone everywhere, 2 calls", left, len(single.regions), len(batch.regions), batch.calls)
	}
}

// Each refusal leaves the table and every plugin as they were.
func TestRegisterBatchAllOrNothing(t *testing.T) {
	ctx := context.Background()
	tb, mem := allocTable(t, "t", 1<<16)
	p := Addr(mem)
	if err := tb.Register(ctx, p, 4096, sdk.PermLocal, nil); err != nil {
		t.Fatal(err)
	}
	ok := func(i int) Range { return Range{P: p + uintptr(i)*4096, N: 4096, Perm: sdk.PermRemoteRead} }
	cases := []struct {
		name    string
		rs      []Range
		refuse  int // index of the plugin that refuses, -1 none
		wantErr error
	}{
		{"overlaps a registered buffer", []Range{ok(3), ok(4), {P: p + 100, N: 10}}, -1, ErrInvalid},
		{"overlaps one of the batch", []Range{ok(3), ok(4), {P: p + 4*4096 + 4095, N: 2}}, -1, ErrInvalid},
		{"outside Allocate memory", []Range{ok(3), {P: p + 1<<16 - 1, N: 2}}, -1, ErrNotRegistered},
		{"the first plugin refuses", []Range{ok(3), ok(4)}, 0, ErrPluginFailed},
		{"the last plugin refuses", []Range{ok(3), ok(4)}, 2, ErrPluginFailed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b, d := newFake("a"), &batchFake{fakePlugin: newFake("b")}, &batchFake{fakePlugin: newFake("d")}
			plugins := []Plugin{a, b, d}
			if c.refuse >= 0 {
				switch c.refuse {
				case 0:
					a.refuse = true
				case 2:
					d.refuse = true
				}
			}
			err := tb.RegisterBatch(ctx, c.rs, plugins)
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("err = %v, want %v", err, c.wantErr)
			}
			if n := len(tb.Buffers()); n != 1 {
				t.Fatalf("%d buffers registered after the refusal, want the 1 from before", n)
			}
			for _, f := range []*fakePlugin{a, b.fakePlugin, d.fakePlugin} {
				if len(f.regions) != 0 {
					t.Fatalf("plugin %s still holds %v", f.name, f.regions)
				}
			}
		})
	}
}

func TestRegisterBatchCapsTheSegment(t *testing.T) {
	tb, mem := allocTable(t, "t", segment.MaxBuffers+1)
	rs := make([]Range, segment.MaxBuffers+1)
	for i := range rs {
		rs[i] = Range{P: Addr(mem) + uintptr(i), N: 1, Perm: sdk.PermLocal}
	}
	if err := tb.RegisterBatch(context.Background(), rs, nil); !errors.Is(err, ErrInvalid) || len(tb.Buffers()) != 0 {
		t.Fatalf("a batch past segment.MaxBuffers: %v, %d registered; want ErrInvalid and none", err, len(tb.Buffers()))
	}
	if err := tb.RegisterBatch(context.Background(), rs[:segment.MaxBuffers], nil); err != nil {
		t.Fatalf("a batch of segment.MaxBuffers: %v", err)
	}
}

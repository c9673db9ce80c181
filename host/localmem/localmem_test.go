package localmem

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ferrydev/ferry/sdk"
)

// fakePlugin records what it was told; refuse makes RegisterMemory fail.
type fakePlugin struct {
	name    string
	refuse  bool
	regions map[uint32]uint64 // region -> offset in its memfd
	fds     map[uint32]int    // region -> the memfd it came with
}

func newFake(name string) *fakePlugin {
	return &fakePlugin{name: name, regions: map[uint32]uint64{}, fds: map[uint32]int{}}
}

func (f *fakePlugin) Name() string { return f.name }

func (f *fakePlugin) RegisterMemory(_ context.Context, region uint32, fd int, off, _ uint64, _ sdk.Perm, loc sdk.MemoryKind) error {
	if f.refuse {
		return errors.New("refused")
	}
	if fd < 0 || loc != Location {
		return errors.New("bad fd or location")
	}
	f.regions[region] = off
	f.fds[region] = fd
	return nil
}

func (f *fakePlugin) UnregisterMemory(_ context.Context, region uint32) error {
	delete(f.regions, region)
	delete(f.fds, region)
	return nil
}

// allocTable is a new table of owner's, closed when the test ends, and
// size bytes allocated from it.
func allocTable(t testing.TB, owner string, size int) (*Table, []byte) {
	t.Helper()
	tb := New(owner, time.Second)
	t.Cleanup(tb.Close)
	mem, err := tb.Allocate(size)
	if err != nil {
		t.Fatal(err)
	}
	return tb, mem
}

func TestRegisterLookupRemoveReplay(t *testing.T) {
	ctx := context.Background()
	tb, mem := allocTable(t, "t", 1<<16)
	a, b := newFake("a"), newFake("b")
	p := Addr(mem)
	if err := tb.Register(ctx, p+4096, 4096, sdk.PermRemoteRead, []Plugin{a, b}); err != nil {
		t.Fatal(err)
	}
	if err := tb.Register(ctx, p, 4096, sdk.PermLocal, []Plugin{a, b}); err != nil {
		t.Fatal(err)
	}
	if err := tb.Register(ctx, p+4000, 200, sdk.PermLocal, []Plugin{a}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("overlapping register: %v, want ErrInvalid", err)
	}
	if err := tb.Register(ctx, p+1<<16, 1, sdk.PermLocal, nil); !errors.Is(err, ErrNotRegistered) {
		t.Fatalf("register outside the allocation: %v, want ErrNotRegistered", err)
	}
	// Region 1 may be read by peers and lies on page boundaries: it is
	// carved into its own memfd (offset 0); local-only region 2 is passed
	// as the allocation's memfd at its offset.
	if len(a.regions) != 2 || a.regions[1] != 0 || a.regions[2] != 0 || a.fds[1] == a.fds[2] {
		t.Fatalf("plugin a holds %v with fds %v, want region 1 at 0 of its own memfd and 2 at 0 of the allocation's", a.regions, a.fds)
	}
	cases := []struct {
		p, n   uint64
		region uint32
		off    uint64
		ok     bool
	}{
		{uint64(p), 1, 2, 0, true},
		{uint64(p) + 4095, 1, 2, 4095, true},
		{uint64(p) + 4095, 2, 0, 0, false}, // spans two buffers
		{uint64(p) + 4096, 4096, 1, 0, true},
		{uint64(p) + 8192, 1, 0, 0, false},
		{uint64(p) - 1, 1, 0, 0, false},
	}
	for _, c := range cases {
		r, off, ok := tb.Lookup(c.p, c.n)
		if r != c.region || off != c.off || ok != c.ok {
			t.Errorf("Lookup(%#x, %d) = %d, %d, %v; want %d, %d, %v", c.p, c.n, r, off, ok, c.region, c.off, c.ok)
		}
	}
	if n := testing.AllocsPerRun(100, func() { tb.Lookup(uint64(p)+10, 10) }); n != 0 {
		t.Errorf("Lookup allocates %v times, want 0", n)
	}
	bufs := tb.Buffers()
	if len(bufs) != 2 || bufs[0].Base != uint64(p) || bufs[1].Perm != sdk.PermRemoteRead {
		t.Fatalf("Buffers() = %+v", bufs)
	}

	// A refusal rolls the others back and records nothing.
	c := newFake("c")
	c.refuse = true
	if err := tb.Register(ctx, p+8192, 4096, sdk.PermLocal, []Plugin{a, c}); !errors.Is(err, ErrPluginFailed) {
		t.Fatalf("register refused by c: %v, want ErrPluginFailed", err)
	}
	if len(a.regions) != 2 || len(tb.Buffers()) != 2 {
		t.Fatalf("after a refused register plugin a holds %v and the table %d buffers; want 2 and 2", a.regions, len(tb.Buffers()))
	}

	// A restarted plugin gets every region again, same ids and offsets.
	fresh := newFake("a")
	if err := tb.Replay(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if len(fresh.regions) != 2 || fresh.regions[1] != 0 || fresh.regions[2] != 0 || fresh.fds[1] != a.fds[1] || fresh.fds[2] != a.fds[2] {
		t.Fatalf("replayed %v with fds %v, want regions 1 and 2 at 0 of the fds first sent, %v", fresh.regions, fresh.fds, a.fds)
	}

	regs, ok := tb.Registered(p)
	if !ok || len(regs) != 2 {
		t.Fatalf("Registered = %v, %v", regs, ok)
	}
	got, err := tb.Remove(uint64(p))
	if err != nil || got.Region != 2 {
		t.Fatalf("Remove = %+v, %v", got, err)
	}
	tb.Unregister(ctx, got.Region, []Plugin{a}, nil)
	if _, ok := a.regions[2]; ok {
		t.Fatal("region 2 still registered with a after Unregister")
	}
	if _, _, ok := tb.Lookup(uint64(p), 1); ok {
		t.Fatal("removed buffer still found")
	}
	if _, err := tb.Remove(uint64(p)); !errors.Is(err, ErrNotRegistered) {
		t.Fatalf("second Remove: %v, want ErrNotRegistered", err)
	}
	if err := tb.Release(p + 1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Release of a non-start: %v, want ErrInvalid", err)
	}
	if err := tb.Release(p); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkLookup(b *testing.B) {
	ctx := context.Background()
	tb, mem := allocTable(b, "b", 64<<12)
	p := Addr(mem)
	for i := range 64 {
		if err := tb.Register(ctx, p+uintptr(i)<<12, 4096, sdk.PermLocal, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		tb.Lookup(uint64(p)+uint64(i%64)<<12+7, 100)
	}
}

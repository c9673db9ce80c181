package localmem

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/ferrydev/ferry/sdk"
)

// foreignRefuser takes memfd regions and refuses foreign ones.
type foreignRefuser struct{ *foreignFake }

func (foreignRefuser) RegisterForeign(context.Context, uint32, int, uint64, uint64, sdk.Perm, sdk.MemoryKind) error {
	return errors.New("attach denied")
}

// heapRanges cuts n ranges of size bytes out of one Go slice.
func heapRanges(n, size int, perm sdk.Perm) ([]byte, []Range) {
	heap := make([]byte, n*size)
	rs := make([]Range, n)
	for i := range rs {
		p := unsafe.Pointer(&heap[i*size])
		rs[i] = Range{P: uintptr(p), N: uintptr(size), Perm: perm, Ptr: p}
	}
	return heap, rs
}

// TestRegisterBatchForeign registers a batch that mixes memory the
// application allocated itself with Allocate memory: the foreign ranges
// go, with this process's pid and their addresses, only to the plugins
// that take them, the Allocate ones to every plugin, all under one
// publication's worth of table change; the foreign ones are pinned and
// marked in the descriptor, and leave again with RemoveBatch.
func TestRegisterBatchForeign(t *testing.T) {
	ctx := context.Background()
	tb := New("t", time.Second)
	defer tb.Close()
	sys := &env{scope: "1", dumpable: true}
	tb.SetAttachEnv(sys.attach())
	tcp, shm, plain := newForeignFake("tcp", true), localOnlyFake{newForeignFake("shm", true)}, &batchFake{fakePlugin: newFake("old")}
	plugins := []Plugin{tcp, shm, plain}
	mem, err := tb.Allocate(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	heap, rs := heapRanges(1000, 64, sdk.PermRemoteReadWrite)
	defer runtime.KeepAlive(heap)
	rs = append(rs, Range{P: Addr(mem), N: 4096, Perm: sdk.PermRemoteRead})
	if err := tb.RegisterBatch(ctx, rs, plugins); err != nil {
		t.Fatal(err)
	}
	if sys.grants != 1 {
		t.Errorf("%d ptrace grants for the batch, want 1", sys.grants)
	}
	if len(tcp.foreign) != 1000 || len(shm.foreign) != 1000 || len(plain.regions) != 1 || len(tcp.regions) != 1 || plain.calls != 1 {
		t.Fatalf("tcp %d foreign + %d, shm %d foreign, old %d regions in %d calls; want 1000 foreign to tcp and shm, the Allocate one to all, one batch call",
			len(tcp.foreign), len(tcp.regions), len(shm.foreign), len(plain.regions), plain.calls)
	}
	bufs := tb.Buffers()
	if len(bufs) != 1001 {
		t.Fatalf("%d buffers, want 1001", len(bufs))
	}
	for i, r := range rs[:1000] {
		id, off, ok := tb.Lookup(uint64(r.P), uint64(r.N))
		if !ok || off != 0 || id != uint32(i+1) || !tb.Foreign(uint64(r.P), 1) {
			t.Fatalf("range %d: region %d offset %d ok %v foreign %v; want region %d, foreign", i, id, off, ok, tb.Foreign(uint64(r.P), 1), i+1)
		}
		if got := tcp.foreign[uint32(i+1)]; got[1] != uint64(r.P) || got[2] != 64 {
			t.Fatalf("tcp got region %d as %v", i+1, got)
		}
	}
	if tb.Foreign(uint64(Addr(mem)), 1) {
		t.Fatal("the Allocate buffer reads as foreign")
	}
	tb.foreign.pmu.Lock()
	pins := len(tb.foreign.pins)
	tb.foreign.pmu.Unlock()
	if pins != 1000 {
		t.Fatalf("%d pins, want 1000", pins)
	}
	bases := make([]uint64, 1000)
	for i, r := range rs[:1000] {
		bases[i] = uint64(r.P)
	}
	gone, err := tb.RemoveBatch(bases)
	if err != nil || len(gone) != 1000 || !gone[0].Foreign {
		t.Fatalf("remove: %d, %v", len(gone), err)
	}
}

// TestRegisterBatchForeignRefusals: each bad batch with app memory is
// refused, naming the buffer and what to do, and leaves the table, the
// plugins and the pins as they were.
func TestRegisterBatchForeignRefusals(t *testing.T) {
	ctx := context.Background()
	tb := New("t", time.Second)
	defer tb.Close()
	sys := &env{scope: "1", dumpable: true}
	tb.SetAttachEnv(sys.attach())
	mem, err := tb.Allocate(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	ap := Addr(mem)
	_, heap := heapRanges(4, 4096, sdk.PermRemoteRead)
	local := func(r Range) Range { r.Perm = sdk.PermLocal; return r }
	alloc := Range{P: ap, N: 4096, Perm: sdk.PermRemoteRead}
	type plugs struct {
		tcp    *foreignFake
		shm    localOnlyFake
		refuse foreignRefuser
	}
	cases := []struct {
		name string
		rs   []Range
		pl   func(p plugs) []Plugin
		env  *env
		is   error
		says string
	}{
		{"across an allocation's start", []Range{heap[0], {P: ap - 100, N: 200}}, func(p plugs) []Plugin { return []Plugin{p.tcp} }, sys, ErrInvalid, "buffer 1 (200 bytes"},
		{"no plugin takes app memory", []Range{alloc, heap[1]}, func(p plugs) []Plugin { return []Plugin{newFake("old")} }, sys, ErrNotRegistered, "buffer 1"},
		{"for peers with a local-only plugin alone", []Range{local(heap[0]), heap[1]}, func(p plugs) []Plugin { return []Plugin{p.shm} }, sys, ErrNotRegistered, "register it LocalOnly"},
		{"scope 3", []Range{heap[0]}, func(p plugs) []Plugin { return []Plugin{p.tcp} }, &env{scope: "3", dumpable: true}, ErrAttachDenied, "kernel.yama.ptrace_scope"},
		{"overlapping app memory in the batch", []Range{heap[0], {P: heap[0].P + 4000, N: 200, Ptr: unsafe.Add(heap[0].Ptr, 4000)}}, func(p plugs) []Plugin { return []Plugin{p.tcp} }, sys, ErrInvalid, "overlap"},
		{"a plugin refuses the app memory", []Range{alloc, heap[0], heap[1]}, func(p plugs) []Plugin { return []Plugin{p.tcp, p.shm, p.refuse} }, sys, ErrPluginFailed, "attach denied"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := plugs{newForeignFake("tcp", true), localOnlyFake{newForeignFake("shm", true)}, foreignRefuser{newForeignFake("x", true)}}
			tb.SetAttachEnv(c.env.attach())
			defer tb.SetAttachEnv(sys.attach())
			err := tb.RegisterBatch(ctx, c.rs, c.pl(p))
			if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), "nothing of the batch was registered") {
				t.Fatalf("error %v, want %v saying %q and that nothing was registered", err, c.is, c.says)
			}
			if len(tb.Buffers()) != 0 {
				t.Fatalf("a refused batch left buffers %v", tb.Buffers())
			}
			for _, f := range []*foreignFake{p.tcp, p.shm.foreignFake, p.refuse.foreignFake} {
				if len(f.foreign) != 0 || len(f.regions) != 0 {
					t.Fatalf("plugin %s still holds foreign %v, regions %v", f.name, f.foreign, f.regions)
				}
			}
			tb.foreign.pmu.Lock()
			pins := len(tb.foreign.pins)
			tb.foreign.pmu.Unlock()
			if pins != 0 {
				t.Fatalf("%d pins left", pins)
			}
		})
	}
}

package host_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"
	"unsafe"

	"github.com/ferrydev/ferry/host"
)

// TestRegisterBatchGoHeap registers 1,000 Go heap slices, each its own
// allocation of the garbage collector, in one call: one publication, every
// plugin that reaches app memory holds them, and verified bytes move
// between them and a peer: the peer writes into them over tcp (shm cannot
// reach a peer's app memory, and says so), and this engine reads into them
// over shm and tcp. UnregisterBatch lets them go with one publication.
func TestRegisterBatchGoHeap(t *testing.T) {
	const n, size = 1000, 4096 + 64
	ctx := context.Background()
	a := newEngine(t, "heapbatch-a")
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	before := pluginRegions(t, a)
	writes := host.PublishWrites(a)
	start := time.Now()
	addrs, err := a.RegisterBatch(ctx, bufs, []host.Perm{host.RemoteReadWrite})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("RegisterBatch of %d Go heap slices: %v", n, took)
	if w := host.PublishWrites(a) - writes; w != 1 {
		t.Fatalf("RegisterBatch of %d buffers published %d times, want once", n, w)
	}
	for name, got := range pluginRegions(t, a) {
		if got-before[name] != n {
			t.Fatalf("plugin %s holds %d more regions, want %d", name, got-before[name], n)
		}
	}
	for i, p := range addrs {
		if want := uint64(uintptr(unsafe.Pointer(&bufs[i][0]))); p != want {
			t.Fatalf("buffer %d registered at %#x, want its address %#x", i, p, want)
		}
	}

	b := newJoinedEngine(t, "heapbatch-b", a.MetastoreURL())
	seg := openSeeing(t, ctx, b, "heapbatch-a", n)
	src, srcAddr := remoteBuffer(t, ctx, b, size)
	for _, i := range []int{0, 1, 517, n - 1} {
		rand.Read(src)
		if err := b.Transfer(ctx, host.Request{Op: host.Write, Local: src[:size-3], Segment: seg.ID, Remote: addrs[i] + 3}); err != nil {
			t.Fatalf("write into heap buffer %d: %v", i, err)
		}
		if !bytes.Equal(bufs[i][3:], src[:size-3]) {
			t.Fatalf("heap buffer %d does not hold the bytes the peer wrote", i)
		}
	}
	err = b.Transfer(ctx, host.Request{Op: host.Write, Local: src, Segment: seg.ID, Remote: addrs[2], Transport: "shm"})
	if !errors.Is(err, host.ErrTransportUnavailable) {
		t.Fatalf("a write into the peer's app memory pinned to shm: %v, want ErrTransportUnavailable", err)
	}

	segB, err := a.OpenSegment(ctx, "heapbatch-b")
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range []string{"shm", "tcp"} {
		for _, i := range []int{3, 999} {
			rand.Read(src)
			clear(bufs[i])
			if err := a.Transfer(ctx, host.Request{Op: host.Read, Local: bufs[i], Segment: segB.ID, Remote: srcAddr, Transport: tr}); err != nil {
				t.Fatalf("%s: read into heap buffer %d: %v", tr, i, err)
			}
			if !bytes.Equal(bufs[i], src) {
				t.Fatalf("%s: heap buffer %d does not hold the peer's bytes", tr, i)
			}
		}
	}

	unregisterBatchOnce(t, ctx, a, bufs)
	for name, got := range pluginRegions(t, a) {
		if got != before[name] {
			t.Fatalf("plugin %s holds %d regions after UnregisterBatch, %d before", name, got, before[name])
		}
	}
}

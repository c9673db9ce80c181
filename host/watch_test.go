package host_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/segment"
)

// waitSegment waits until cond holds of what e caches of segment id,
// woken by each change of e's open segments, for at most 10s.
func waitSegment(t *testing.T, e *host.Engine, id host.SegmentID, what string, cond func(retired string, gone bool, bufs []segment.Buffer) bool) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		ch := host.SegmentsChanged(e)
		retired, gone, bufs, ok := host.SegmentHandle(e, id)
		if !ok {
			t.Fatalf("%s: segment %d is not open", what, id)
		}
		if cond(retired, gone, bufs) {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("%s: not seen within 10s (retired %q, gone %v, buffers %+v)", what, retired, gone, bufs)
		}
	}
}

// TestOpenSegmentFollowsTheMetastore: with the embedded metastore, an
// open segment follows its peer through the metastore's watch. A buffer
// the peer registers later is usable through the handle without opening
// the segment again, and when the peer restarts the old handle is retired
// before any transfer is tried: the first request through it is refused
// (INVALID, nothing sent) and names the new life.
func TestOpenSegmentFollowsTheMetastore(t *testing.T) {
	ctx := context.Background()
	a := newEngine(t, "follow-a")
	b, err := host.New(ctx, joinConfig("follow-b", a.MetastoreURL()))
	if err != nil {
		t.Fatal(err)
	}
	bClosed := false
	defer func() {
		if !bClosed {
			b.Close()
		}
	}()
	bmem, err := b.Allocate(2 << 20)
	if err != nil {
		t.Fatal(err)
	}
	first, err := b.Register(ctx, bmem[:1<<20], host.RemoteReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	seg, err := a.OpenSegment(ctx, "follow-b")
	if err != nil {
		t.Fatal(err)
	}
	local := localBuffer(t, ctx, a, 1<<20)
	src := local[:64<<10]
	rand.Read(src)
	if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: src, Segment: seg.ID, Remote: first + 4096}); err != nil {
		t.Fatal(err)
	}

	// b registers the second half: a sees it through the watch.
	second, err := b.Register(ctx, bmem[1<<20:], host.RemoteReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	waitSegment(t, a, seg.ID, "the peer's new buffer", func(_ string, _ bool, bufs []segment.Buffer) bool {
		return segment.Find(bufs, second) >= 0
	})
	rand.Read(src)
	if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: src, Segment: seg.ID, Remote: second + 8192}); err != nil {
		t.Fatalf("write into the peer's new buffer through the handle opened before it: %v", err)
	}
	if !bytes.Equal(bmem[1<<20+8192:1<<20+8192+len(src)], src) {
		t.Fatal("the write into the peer's new buffer did not land")
	}

	// b restarts under the same name: a new incarnation.
	oldInc := b.Incarnation()
	bClosed = true
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b2, err := host.New(ctx, joinConfig("follow-b", a.MetastoreURL()))
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	b2mem, err := b2.Allocate(2 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b2.Register(ctx, b2mem, host.RemoteReadWrite); err != nil {
		t.Fatal(err)
	}
	waitSegment(t, a, seg.ID, "the peer's restart", func(retired string, _ bool, _ []segment.Buffer) bool { return retired != "" })
	write := host.Request{Op: host.Write, Local: src, Segment: seg.ID, Remote: second + 8192}
	err = a.Transfer(ctx, write)
	transferErr(t, "write through the handle of the previous life", err, host.StateInvalid, host.ErrSegmentNotFound, fmt.Sprintf("now incarnation %#x", b2.Incarnation()))
	if b2.Incarnation() == oldInc {
		t.Fatal("the restarted peer kept its incarnation")
	}
	if !bytes.Equal(b2mem, make([]byte, len(b2mem))) {
		t.Fatal("a request through the retired handle reached the restarted peer's memory")
	}
	// Opening again reaches the new life.
	seg2, err := a.OpenSegment(ctx, "follow-b")
	if err != nil || seg2.ID == seg.ID || seg2.Incarnation != b2.Incarnation() {
		t.Fatalf("reopened %+v, %v; want a new handle to incarnation %#x", seg2, err, b2.Incarnation())
	}
	write.Segment, write.Remote = seg2.ID, segmentBase(t, seg2)
	if err := a.Transfer(ctx, write); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b2mem[:len(src)], src) {
		t.Fatal("the write through the new handle did not land in the restarted peer")
	}
}

func segmentBase(t *testing.T, s host.Segment) uint64 {
	t.Helper()
	if len(s.Buffers) == 0 {
		t.Fatalf("segment %q lists no buffers", s.Name)
	}
	return s.Buffers[0].Base
}

package host_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host"
)

// TestUnsupportedRegionMovesToTCP: a region shm cannot share alone (not
// page-aligned in its allocation) makes shm answer "unsupported"; the
// write then goes over tcp, not tried on shm again, and lands.
func TestUnsupportedRegionMovesToTCP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := newEngine(t, "unsup-b")
	mem, err := b.Allocate(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	const off, n = 100, 64 << 10 // starts inside a page
	if _, err := b.Register(ctx, mem[off:off+n], host.RemoteReadWrite); err != nil {
		t.Fatal(err)
	}
	a, err := host.New(ctx, joinConfig("unsup-a", b.MetastoreURL()))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	local, err := a.Allocate(n)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Register(ctx, local, host.LocalOnly); err != nil {
		t.Fatal(err)
	}
	rand.Read(local)
	seg, err := a.OpenSegment(ctx, "unsup-b")
	if err != nil {
		t.Fatal(err)
	}
	if text, _ := a.Explain(host.Request{Op: host.Write, Local: local, Segment: seg.ID, Remote: seg.Buffers[0].Base}); !bytes.Contains([]byte(text), []byte("shm: taken")) {
		t.Fatalf("the test needs shm chosen first:\n%s", text)
	}
	if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: local, Segment: seg.ID, Remote: seg.Buffers[0].Base}); err != nil {
		t.Fatalf("write to a region shm cannot share: %v", err)
	}
	if !bytes.Equal(mem[off:off+n], local) {
		t.Fatal("the write completed but the region holds other bytes")
	}
	if st := a.Status(ctx); len(st.Failures) == 0 || st.Failures[0].Transport != "shm" || st.Failures[0].Status != "unsupported operation" || !st.Failures[0].Retried {
		t.Errorf("failures %+v: want shm's unsupported attempt, retried", st.Failures)
	}
}

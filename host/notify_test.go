package host_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/control"
)

// newP2PEngine starts an engine with no metastore: peers reach it only
// through its control service.
func newP2PEngine(t *testing.T, name string) *host.Engine {
	t.Helper()
	cfg := config.Default(name)
	cfg.PluginDir = binDir
	cfg.Metastore = config.Metastore{Kind: config.MetastoreNone}
	e, err := host.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func TestControlServiceDescriptorAndPing(t *testing.T) {
	e := newEngine(t, "ctl-a")
	// The engine has the run's cluster secret (config.Default): its
	// control service answers only calls signed with it.
	c, err := control.DialOptions(e.ControlAddr(), control.Options{Secret: envSecret(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	name, inc, err := c.Ping(ctx)
	if err != nil || name != "ctl-a" || inc != e.Incarnation() {
		t.Fatalf("Ping = %q, %#x, %v; want %q, %#x", name, inc, err, "ctl-a", e.Incarnation())
	}
	raw, err := c.Descriptor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw, []byte(`"control":"`+e.ControlAddr()+`"`)) || !bytes.Contains(raw, []byte(`"name":"ctl-a"`)) {
		t.Fatalf("descriptor %s lacks the engine's name or control address", raw)
	}
}

// p2pPair returns two engines without a metastore, a open on b by b's
// control address, and a registered buffer of n bytes in each.
func p2pPair(t *testing.T, n int) (a, b *host.Engine, seg host.Segment, la []byte, lb []byte, rb uint64) {
	t.Helper()
	ctx := context.Background()
	a, b = newP2PEngine(t, "p2p-a"), newP2PEngine(t, "p2p-b")
	la, _ = a.Allocate(n)
	if _, err := a.Register(ctx, la, host.LocalOnly); err != nil {
		t.Fatal(err)
	}
	lb, _ = b.Allocate(n)
	rb, err := b.Register(ctx, lb, host.RemoteReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.OpenSegment(ctx, "p2p-b"); !errors.Is(err, host.ErrSegmentNotFound) {
		t.Fatalf("open by name without a metastore: %v, want ErrSegmentNotFound", err)
	}
	seg, err = a.OpenSegment(ctx, b.ControlAddr())
	if err != nil {
		t.Fatal(err)
	}
	if seg.Name != "p2p-b" || seg.Incarnation != b.Incarnation() {
		t.Fatalf("segment %+v, want p2p-b at incarnation %#x", seg, b.Incarnation())
	}
	return a, b, seg, la, lb, rb
}

func TestPeerToPeerMovesVerifiedBytes(t *testing.T) {
	const n = 3<<20 + 17
	a, _, seg, la, lb, rb := p2pPair(t, n)
	copy(la, pattern(n, 0, 5))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: la, Segment: seg.ID, Remote: rb}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(lb, la) {
		t.Fatal("written bytes differ")
	}
	clear(la)
	copy(lb, pattern(n, 0, 9))
	if err := a.Transfer(ctx, host.Request{Op: host.Read, Local: la[1:], Segment: seg.ID, Remote: rb + 1}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(la[1:], lb[1:]) {
		t.Fatal("read bytes differ")
	}
}

// expect reads one notification or fails after a while.
func expect(t *testing.T, e *host.Engine) host.Notification {
	t.Helper()
	select {
	case n := <-e.Notifications():
		return n
	case <-time.After(10 * time.Second):
		t.Fatal("no notification arrived")
	}
	return host.Notification{}
}

// expectNone checks that no notification arrives for a while.
func expectNone(t *testing.T, e *host.Engine) {
	t.Helper()
	select {
	case n := <-e.Notifications():
		t.Fatalf("unexpected notification %+v", n)
	case <-time.After(300 * time.Millisecond):
	}
}

func TestNotifyArrivesOnce(t *testing.T) {
	a, b, seg, _, _, _ := p2pPair(t, 4096)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Notify(ctx, seg.ID, "kv-block", []byte("layer 3")); err != nil {
		t.Fatal(err)
	}
	n := expect(t, b)
	if n.From != "p2p-a" || n.Name != "kv-block" || string(n.Msg) != "layer 3" {
		t.Fatalf("got %+v", n)
	}
	expectNone(t, b)
	if err := a.Notify(ctx, 99, "x", nil); !errors.Is(err, host.ErrSegmentNotFound) {
		t.Fatalf("notify an unopened segment: %v", err)
	}
	if err := a.Notify(ctx, seg.ID, "", nil); !errors.Is(err, host.ErrInvalid) {
		t.Fatalf("notify without a name: %v", err)
	}
	if st := quick(b).Notifications; st.Received != 1 || st.Duplicates != 0 {
		t.Fatalf("receiver stats %+v", st)
	}
	if st := quick(a).Notifications; st.Sent != 1 {
		t.Fatalf("sender stats %+v", st)
	}
}

func TestSubmitWithNotify(t *testing.T) {
	const tasks, size = 8, 4096
	a, b, seg, la, lb, rb := p2pPair(t, tasks*size)
	copy(la, pattern(tasks*size, 0, 1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id, err := a.AllocateBatch(2 * tasks)
	if err != nil {
		t.Fatal(err)
	}
	var reqs []host.Request
	for i := range tasks {
		off := i * size
		reqs = append(reqs, host.Request{Op: host.Write, Local: la[off : off+size], Segment: seg.ID, Remote: rb + uint64(off)})
	}
	if err := a.SubmitWithNotify(id, host.Notification{Name: "landed", Msg: []byte("8 blocks")}, reqs...); err != nil {
		t.Fatal(err)
	}
	if err := a.Wait(ctx, id); err != nil {
		t.Fatal(err)
	}
	n := expect(t, b)
	if n.From != "p2p-a" || n.Name != "landed" || string(n.Msg) != "8 blocks" {
		t.Fatalf("got %+v", n)
	}
	// The peer's bytes are there when it learns they landed.
	if !bytes.Equal(lb, la) {
		t.Fatal("written bytes differ")
	}
	a.FreeBatch(id)
	expectNone(t, b)

	// One task of the submission fails (INVALID: past the peer's
	// buffer): the others complete, and no notification is sent.
	id, err = a.AllocateBatch(tasks)
	if err != nil {
		t.Fatal(err)
	}
	reqs[tasks-1].Remote = rb + tasks*size
	if err := a.SubmitWithNotify(id, host.Notification{Name: "landed"}, reqs...); err != nil {
		t.Fatal(err)
	}
	if err := a.Wait(ctx, id); err != nil {
		t.Fatal(err)
	}
	if st, _ := a.BatchStatus(id); st.Completed != tasks-1 || st.Failed != 1 {
		t.Fatalf("batch %+v, want one failed task", st)
	}
	expectNone(t, b)
	a.FreeBatch(id)
	if st := quick(a).Notifications; st.Sent != 1 || st.NotSent != 1 {
		t.Fatalf("sender stats %+v, want 1 sent and 1 not sent", st)
	}
	if st := quick(b).Notifications; st.Received != 1 || st.Duplicates != 0 {
		t.Fatalf("receiver stats %+v", st)
	}
}

// A freed batch decides its submission on the spot: a task canceled by
// FreeBatch means no notification.
func TestSubmitWithNotifyFreedBeforeDone(t *testing.T) {
	const size = 64 << 20
	a, b, seg, _, _, _ := p2pPair(t, 4096)
	big, _ := a.Allocate(size)
	ctx := context.Background()
	if _, err := a.Register(ctx, big, host.LocalOnly); err != nil {
		t.Fatal(err)
	}
	id, err := a.AllocateBatch(1)
	if err != nil {
		t.Fatal(err)
	}
	// A request past the peer's buffer is INVALID at once; freeing then
	// must not send either.
	if err := a.SubmitWithNotify(id, host.Notification{Name: "n"}, host.Request{Op: host.Write, Local: big, Segment: seg.ID, Remote: 1}); err != nil {
		t.Fatal(err)
	}
	a.FreeBatch(id)
	expectNone(t, b)
	if st := quick(a).Notifications; st.NotSent != 1 {
		t.Fatalf("stats %+v", st)
	}
}

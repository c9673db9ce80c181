package host_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host"
)

// TestSubmitMixedRequests: one Submit call whose requests change what a
// run of them shares (priority, transport, deadline, op) and that holds
// invalid ones among valid ones, more than a publication burst of each:
// every task ends as its own request says, the valid ones with their
// bytes in place, the invalid ones INVALID with what is wrong and
// nothing of theirs written.
func TestSubmitMixedRequests(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, "mixed")
	const half = 4 << 20
	src, dst, seg, base := ownSegment(t, e, half)
	rand.Read(src)
	clear(dst)
	unregistered := make([]byte, 4096)
	const block = 4096
	var reqs []host.Request
	var want []error // nil: COMPLETED
	add := func(r host.Request, err error) {
		reqs = append(reqs, r)
		want = append(want, err)
	}
	off := 0
	next := func(n int) (local []byte, remote uint64) {
		local, remote = src[off:off+n], base+uint64(off)
		off += n
		return local, remote
	}
	w := func(n int, set func(*host.Request)) host.Request {
		local, remote := next(n)
		r := host.Request{Op: host.Write, Local: local, Segment: seg.ID, Remote: remote}
		set(&r)
		return r
	}
	same := func(*host.Request) {}
	for range 11 {
		add(w(block, same), nil)
	}
	add(host.Request{Op: host.Write, Local: unregistered, Segment: seg.ID, Remote: base + half - block}, host.ErrNotRegistered)
	for range 3 {
		add(w(block, same), nil)
	}
	add(host.Request{Op: host.Write, Local: src[:block], Segment: seg.ID, Remote: base + half - block/2}, host.ErrOutOfBounds)
	for range 9 {
		add(w(block, func(r *host.Request) { r.Priority = host.PriorityHigh }), nil)
	}
	for range 3 {
		add(w(block, func(r *host.Request) { r.Transport = "tcp" }), nil)
	}
	deadline := time.Now().Add(time.Minute)
	for range 10 {
		add(w(block+1, func(r *host.Request) { r.Deadline = deadline }), nil)
	}
	add(w(1<<20+3, same), nil)
	for range 17 {
		add(w(block, same), nil)
	}
	// Reads, into src past what the writes send, of bytes in dst
	// that no write touches.
	readAt, from := off, 3<<20
	rand.Read(dst[from : from+9*block])
	for k := range 9 {
		add(host.Request{Op: host.Read, Local: src[readAt+k*block : readAt+(k+1)*block], Segment: seg.ID, Remote: base + uint64(from+k*block)}, nil)
	}
	id := runBatch(t, ctx, e, reqs...)
	defer e.FreeBatch(id)
	for i, r := range reqs {
		ts, err := e.TaskStatus(id, i)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case want[i] == nil && (ts.State != host.StateCompleted || ts.Bytes != uint64(len(r.Local))):
			t.Errorf("task %d (%v of %d, priority %v, transport %q): %v, %d bytes, %v; want COMPLETED", i, r.Op, len(r.Local), r.Priority, r.Transport, ts.State, ts.Bytes, ts.Err)
		case want[i] != nil && (ts.State != host.StateInvalid || !errors.Is(ts.Err, want[i])):
			t.Errorf("task %d: %v, %v; want INVALID with %v", i, ts.State, ts.Err, want[i])
		}
	}
	if !bytes.Equal(dst[:off], src[:off]) {
		t.Error("the written bytes differ from the sources")
	}
	if !bytes.Equal(src[readAt:readAt+9*block], dst[from:from+9*block]) {
		t.Error("the read bytes differ from the remote ones")
	}
	if tail := dst[half-block:]; !bytes.Equal(tail, make([]byte, block)) {
		t.Errorf("an invalid request's range was written: %x...", tail[:16])
	}
}

// TestSharedRouteFollowsPlugins: one request at a time to the engine's
// own segment goes over shm, each Transfer taking the route the last
// one chose while no plugin changed (the engine's shared route); once
// shm's process is killed, the next one must not be put on the dead
// run: it completes in its first attempt, failover being off (over tcp
// while shm is down, or over shm's next run once it is back). Back, shm
// listens elsewhere; the restart's replay opened the engine's own
// segment there, before the metastore's copy of the descriptor follows,
// so the writes after it complete in their first attempt too. Every
// write's bytes are checked.
func TestSharedRouteFollowsPlugins(t *testing.T) {
	const bs = 4 << 10
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := noFailoverEngine(t, ctx, "sharedroute")
	src, dst, seg, base := ownSegment(t, e, 64*bs)
	rand.Read(src)
	k := 0
	write := func(what string) {
		t.Helper()
		off := (k % 64) * bs
		k++
		clear(dst[off : off+bs])
		if err := e.Transfer(ctx, host.Request{Op: host.Write, Local: src[off : off+bs], Segment: seg.ID, Remote: base + uint64(off)}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !bytes.Equal(dst[off:off+bs], src[off:off+bs]) {
			t.Fatalf("%s: the bytes written differ from the source", what)
		}
	}
	for range 3 {
		write("before the kill")
	}
	restarts := killSeen(t, e, "shm")
	write("after shm's kill")
	waitBack(t, e, "shm", restarts)
	// Back: requests go over its new run, at once, each in one attempt.
	for range 3 {
		write("after shm's restart")
	}
}

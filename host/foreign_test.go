package host_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/internal/cmem"
)

// Memory the application allocated itself (a Go slice, C malloc, an
// anonymous mapping) is registered without a memfd: the tcp plugin
// reaches it by cross-memory attach, one extra copy; shm reaches it on
// this side only, with no extra copy (foreign_shm_test.go), and is never
// chosen when the target is such memory.

// foreignCopied is the tcp plugin's count of bytes it copied to or from
// memory the application allocated itself.
func foreignCopied(t *testing.T, e *host.Engine) uint64 {
	t.Helper()
	return pluginCounter(t, e, "tcp", "foreign_bytes_copied")
}

// peerPair starts an engine name+"-a" here and a peer engine name+"-b"
// on its metastore, with args after those, and opens the peer's segment.
func peerPair(t *testing.T, name string, args ...string) (*host.Engine, *peer, host.Segment) {
	t.Helper()
	a := newEngine(t, name+"-a")
	b := startPeer(t, append([]string{"--name", name + "-b", "--metastore", a.MetastoreURL()}, args...)...)
	seg, err := a.OpenSegment(context.Background(), name+"-b")
	if err != nil {
		t.Fatal(err)
	}
	return a, b, seg
}

// explainHas checks that a's explanation of req names each of wants.
func explainHas(t *testing.T, a *host.Engine, req host.Request, wants ...string) {
	t.Helper()
	why, err := a.Explain(req)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range wants {
		if !strings.Contains(why, want) {
			t.Errorf("explain lacks %q:\n%s", want, why)
		}
	}
}

// moveVerified reads into local from the peer b's buffer at remote and
// writes back, at sizes from one byte to 16 MiB and unaligned offsets that
// fit len(local), over transport ("" lets the engine choose); it checks
// each read against the peer's pattern seed and each write against the
// peer's hash, refills the peer, and returns the bytes moved.
func moveVerified(t *testing.T, a *host.Engine, b *peer, seg host.SegmentID, local []byte, remote, seed uint64, transport string) uint64 {
	t.Helper()
	ctx := context.Background()
	span := len(local)
	var moved uint64
	// Inline, pooled and split copies, at unaligned offsets.
	for _, n := range []int{1, 4097, 1<<20 + 7, 16<<20 + 1} {
		for _, off := range [][2]int{{0, 0}, {13, 4093}} {
			loff, roff := off[0], off[1]
			if loff+n > span || roff+n > span {
				continue
			}
			dst := local[loff : loff+n]
			clear(dst)
			if err := a.Transfer(ctx, host.Request{Op: host.Read, Local: dst, Segment: seg, Remote: remote + uint64(roff), Transport: transport}); err != nil {
				t.Fatalf("read %d@%d: %v", n, roff, err)
			}
			if want := pattern(n, uint64(roff), seed); !bytes.Equal(dst, want) {
				t.Fatalf("read %d bytes at %d: bytes differ from the peer's pattern", n, roff)
			}
			rand.Read(dst)
			if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: dst, Segment: seg, Remote: remote + uint64(roff), Transport: transport}); err != nil {
				t.Fatalf("write %d@%d: %v", n, roff, err)
			}
			if got, want := b.ask(t, "sha256 %d %d", roff, n), sum(dst); got != want {
				t.Fatalf("write %d bytes at %d: peer has sha256 %s, sent %s", n, roff, got, want)
			}
			b.ask(t, "fill %d", seed)
			moved += 2 * uint64(n)
		}
	}
	return moved
}

// TestForeignMemoryTwoProcesses moves verified bytes between Go heap and
// C malloc memory in this process and an engine in a child process over
// tcp (pinned: on this machine the engine prefers shm, which reaches the
// local app memory with no extra copy), and explain names each one's
// copy.
func TestForeignMemoryTwoProcesses(t *testing.T) {
	const seed = 21
	const span = 16<<20 + 8192
	ctx := context.Background()
	a, b, seg := peerPair(t, "foreign", "--expose", fmt.Sprint(span), "--pattern", fmt.Sprint(seed))
	remote := b.Ready.Buffers[0].Base

	cbuf, err := cmem.Malloc(span)
	if err != nil {
		t.Skipf("no C memory: %v", err) // cgo off: the Go heap case below still runs
	}
	defer cmem.Free(cbuf)
	kinds := []struct {
		name string
		mem  []byte
	}{{"go-heap", make([]byte, span)}, {"c-malloc", cbuf}}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			local := k.mem
			base, err := a.Register(ctx, local, host.LocalOnly)
			if err != nil {
				t.Fatal(err)
			}
			if base != uint64(uintptr(unsafe.Pointer(&local[0]))) {
				t.Fatalf("Register returned %#x for memory at %p", base, &local[0])
			}
			defer func() {
				if err := a.Unregister(ctx, local); err != nil {
					t.Errorf("unregister: %v", err)
				}
			}()
			explainHas(t, a, host.Request{Op: host.Read, Local: local[:4096], Segment: seg.ID, Remote: remote}, "shm: taken", "no extra copy", "tcp: usable, a later attempt", "one extra copy here", "Engine.Allocate", "one extra copy")
			copied := foreignCopied(t, a)
			moved := moveVerified(t, a, b, seg.ID, local, remote, seed, "tcp")
			if got := foreignCopied(t, a) - copied; got < moved {
				t.Errorf("tcp copied %d bytes of app memory, want at least the %d moved: shm or no copy carried them", got, moved)
			}
		})
	}
}

// TestForeignMemoryBadInput: overlapping registrations (with Allocate
// memory too) and an engine whose only plugin maps memory are refused
// clearly, and nothing is registered.
func TestForeignMemoryBadInput(t *testing.T) {
	ctx := context.Background()
	a := newEngine(t, "foreign-bad")
	heap := make([]byte, 8192)
	if _, err := a.Register(ctx, heap[:4096], host.RemoteRead); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Register(ctx, heap[4000:4200], host.LocalOnly); !errors.Is(err, host.ErrInvalid) || !strings.Contains(err.Error(), "overlaps") {
		t.Errorf("overlapping app memory: %v, want ErrInvalid", err)
	}
	alloc, err := a.Allocate(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	// A range that starts just before the allocation and runs into it.
	across := unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(&alloc[0]), -100)), 200)
	if _, err := a.Register(ctx, across, host.LocalOnly); !errors.Is(err, host.ErrInvalid) || !strings.Contains(err.Error(), "Engine.Allocate") {
		t.Errorf("range across an allocation's start: %v, want ErrInvalid naming Engine.Allocate", err)
	}
	if _, err := a.Register(ctx, alloc, host.LocalOnly); err != nil {
		t.Fatalf("the allocation itself: %v", err)
	}
	if err := a.Unregister(ctx, heap[:4096]); err != nil {
		t.Fatal(err)
	}
	if err := a.Unregister(ctx, heap[:4096]); !errors.Is(err, host.ErrNotRegistered) {
		t.Errorf("second unregister: %v, want ErrNotRegistered", err)
	}

	// With shm alone nothing can reach app memory for peers (shm reaches
	// it only for this engine's own transfers): Register says so.
	cfg := config.Default("foreign-shm-only")
	cfg.PluginDir = binDir
	cfg.Plugins = cfg.Plugins[1:]
	if cfg.Plugins[0].Name != "shm" {
		t.Fatalf("default plugins changed: %v", cfg.Plugins)
	}
	cfg.Metastore.Listen = "127.0.0.1:0"
	cfg.Control.Listen = "127.0.0.1:0"
	s, err := host.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Register(ctx, heap, host.RemoteRead); !errors.Is(err, host.ErrNotRegistered) || !strings.Contains(err.Error(), "Engine.Allocate") {
		t.Errorf("app memory with shm alone: %v, want ErrNotRegistered saying to allocate with Engine.Allocate", err)
	}
	// For its own transfers shm reaches it.
	if _, err := s.Register(ctx, heap, host.LocalOnly); err != nil {
		t.Errorf("LocalOnly app memory with shm alone: %v", err)
	}
}

// TestForeignMemoryFreedWhileRegistered unmaps registered app memory, as
// an application that breaks the contract would: the transfers on it
// fail cleanly (no hang, no other memory touched: the peer's bytes are
// unchanged), and the buffer still unregisters.
func TestForeignMemoryFreedWhileRegistered(t *testing.T) {
	const seed = 22
	ctx := context.Background()
	a, b, seg := peerPair(t, "freed", "--expose", "1MiB", "--pattern", fmt.Sprint(seed))
	remote := b.Ready.Buffers[0].Base
	m, err := unix.Mmap(-1, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Register(ctx, m, host.RemoteReadWrite); err != nil {
		t.Fatal(err)
	}
	if err := unix.Munmap(m); err != nil {
		t.Fatal(err)
	}
	before := b.ask(t, "sha256 0 1048576")
	tctx, cancel := context.WithTimeout(ctx, time.Minute) // a hang fails the test, never paces it
	defer cancel()
	for _, op := range []host.Op{host.Write, host.Read} {
		err := a.Transfer(tctx, host.Request{Op: op, Local: m[:65536], Segment: seg.ID, Remote: remote})
		if err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%v on unmapped app memory: %v, want a failure", op, err)
		}
		t.Logf("%v on unmapped app memory: %v", op, err)
	}
	if got := b.ask(t, "sha256 0 1048576"); got != before {
		t.Error("the peer's memory changed")
	}
	if err := a.Unregister(ctx, m); err != nil {
		t.Fatalf("unregister unmapped memory: %v", err)
	}
}

// TestUnregisterForeignInFlight unregisters app memory while reads into it
// are in flight: each task ends COMPLETED or NOT_REGISTERED, and once
// Unregister has returned no plugin writes into the memory again.
func TestUnregisterForeignInFlight(t *testing.T) {
	const tasks, size = 64, 256 << 10
	ctx := context.Background()
	a, b, seg := peerPair(t, "inflight", "--expose", fmt.Sprint(tasks*size), "--pattern", "23")
	local := make([]byte, tasks*size)
	if _, err := a.Register(ctx, local, host.LocalOnly); err != nil {
		t.Fatal(err)
	}
	id, err := a.AllocateBatch(tasks)
	if err != nil {
		t.Fatal(err)
	}
	defer a.FreeBatch(id)
	reqs := make([]host.Request, tasks)
	for i := range reqs {
		reqs[i] = host.Request{Op: host.Read, Local: local[i*size : (i+1)*size], Segment: seg.ID, Remote: b.Ready.Buffers[0].Base + uint64(i*size)}
	}
	if err := a.Submit(id, reqs...); err != nil {
		t.Fatal(err)
	}
	if err := a.Unregister(ctx, local); err != nil {
		t.Fatal(err)
	}
	for i := range local {
		local[i] = 0xee
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_ = a.Wait(wctx, id) // some tasks fail: that is the point
	if wctx.Err() != nil {
		t.Fatal("the batch did not end")
	}
	completed := 0
	for i := range tasks {
		ts, err := a.TaskStatus(id, i)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case ts.State == host.StateCompleted:
			completed++
		case errors.Is(ts.Err, host.ErrNotRegistered):
		default:
			t.Errorf("task %d: %v %v, want COMPLETED or NOT_REGISTERED", i, ts.State, ts.Err)
		}
	}
	for i, c := range local {
		if c != 0xee {
			t.Fatalf("byte %d changed after Unregister returned (%d of %d tasks completed)", i, completed, tasks)
		}
	}
	t.Logf("%d of %d tasks completed before Unregister", completed, tasks)
}

// TestForeignMemoryAtThePeer: a peer engine in another process exposes
// Go heap memory; its descriptor says so, this engine routes to tcp
// (never shm, although the peer is on this machine), explain names the
// peer's extra copy, and the bytes arrive verified both ways.
func TestForeignMemoryAtThePeer(t *testing.T) {
	const seed, span = 24, 4<<20 + 4096
	ctx := context.Background()
	a, b, seg := peerPair(t, "peer-app", "--expose", fmt.Sprint(span), "--pattern", fmt.Sprint(seed), "--app-memory")
	remote := b.Ready.Buffers[0].Base
	local := localBuffer(t, ctx, a, span)
	explainHas(t, a, host.Request{Op: host.Write, Local: local[:4096], Segment: seg.ID, Remote: remote}, "tcp: taken", "shm: considered, skipped: maps memory for zero copy and cannot reach the target buffer", "one extra copy there")
	for _, n := range []int{1, 65537, 4 << 20} {
		dst := local[7 : 7+n]
		clear(dst)
		if err := a.Transfer(ctx, host.Request{Op: host.Read, Local: dst, Segment: seg.ID, Remote: remote + 3}); err != nil {
			t.Fatalf("read %d: %v", n, err)
		}
		if !bytes.Equal(dst, pattern(n, 3, seed)) {
			t.Fatalf("read %d bytes: bytes differ from the peer's pattern", n)
		}
		rand.Read(dst)
		if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: dst, Segment: seg.ID, Remote: remote + 5}); err != nil {
			t.Fatalf("write %d: %v", n, err)
		}
		if got, want := b.ask(t, "sha256 %d %d", 5, n), sum(dst); got != want {
			t.Fatalf("write %d bytes: peer has sha256 %s, sent %s", n, got, want)
		}
		b.ask(t, "fill %d", seed)
	}
}

// TestForeignMemoryAfterPluginRestart kills the tcp plugin while Go heap
// memory is registered: the restarted run gets the region again (replay),
// attaches to this process as its predecessor did (under Yama scope 1 the
// one PR_SET_PTRACER grant covers every descendant), and moves verified
// bytes from it.
func TestForeignMemoryAfterPluginRestart(t *testing.T) {
	const seed, span = 25, 1 << 20
	ctx := context.Background()
	a, b, seg := peerPair(t, "restart-app", "--expose", fmt.Sprint(span), "--pattern", fmt.Sprint(seed))
	local := make([]byte, span)
	if _, err := a.Register(ctx, local, host.LocalOnly); err != nil {
		t.Fatal(err)
	}
	before := pluginStatus(a, "tcp")
	if err := syscall.Kill(before.PID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the tcp plugin (pid %d): %v", before.PID, err)
	}
	after := waitBack(t, a, "tcp", before.Restarts)
	if after.PID == before.PID {
		t.Fatalf("tcp still runs as pid %d", after.PID)
	}
	if err := a.Transfer(ctx, host.Request{Op: host.Read, Local: local, Segment: seg.ID, Remote: b.Ready.Buffers[0].Base, Transport: "tcp"}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(local, pattern(span, 0, seed)) {
		t.Fatal("read after the restart: bytes differ from the peer's pattern")
	}
	rand.Read(local)
	if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: local, Segment: seg.ID, Remote: b.Ready.Buffers[0].Base, Transport: "tcp"}); err != nil {
		t.Fatal(err)
	}
	if got, want := b.ask(t, "sha256 0 %d", span), sum(local); got != want {
		t.Fatalf("write after the restart: peer has sha256 %s, sent %s", got, want)
	}
	if foreignCopied(t, a) < 2*span {
		t.Errorf("the restarted tcp copied %d bytes of app memory, want %d", foreignCopied(t, a), 2*span)
	}
}

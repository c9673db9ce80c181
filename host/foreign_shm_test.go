package host_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/internal/cmem"
)

// pluginCounter is one of plugin's Stats counters.
func pluginCounter(t *testing.T, e *host.Engine, plugin, name string) uint64 {
	t.Helper()
	for _, p := range e.Status(context.Background()).Plugins {
		if p.Name == plugin {
			return p.Counters[name]
		}
	}
	t.Fatalf("no %s plugin", plugin)
	return 0
}

// TestForeignMemoryOverShm moves verified bytes between Go heap and C
// malloc memory in this process and Engine.Allocate memory of an engine in
// a child process, without a transport hint: on the same machine the
// engine takes shm, which copies the app memory by cross-memory attach
// straight to and from its mapping of the peer's memfd (no extra copy:
// process_vm_readv/writev replaces the memcpy), and explain says so. shm
// carries every byte (its counter moves, tcp's does not).
func TestForeignMemoryOverShm(t *testing.T) {
	const seed = 26
	const span = 16<<20 + 8192
	ctx := context.Background()
	a, b, seg := peerPair(t, "shm-app", "--expose", fmt.Sprint(span), "--pattern", fmt.Sprint(seed))
	remote := b.Ready.Buffers[0].Base
	kinds := []struct {
		name string
		mem  func(t *testing.T) []byte
	}{
		{"go-heap", func(*testing.T) []byte { return make([]byte, span) }},
		{"c-malloc", func(t *testing.T) []byte {
			m, err := cmem.Malloc(span)
			if err != nil {
				t.Skipf("no C memory: %v", err) // cgo off: the Go heap case still runs
			}
			t.Cleanup(func() { cmem.Free(m) })
			return m
		}},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			local := k.mem(t)
			if _, err := a.Register(ctx, local, host.LocalOnly); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := a.Unregister(ctx, local); err != nil {
					t.Errorf("unregister: %v", err)
				}
			}()
			explainHas(t, a, host.Request{Op: host.Write, Local: local[:4096], Segment: seg.ID, Remote: remote}, "shm: taken", "straight to or from the peer's mapping, no extra copy", "tcp: usable, a later attempt", "one extra copy here")
			shmBefore, tcpBefore := pluginCounter(t, a, "shm", "foreign_bytes_copied"), pluginCounter(t, a, "tcp", "foreign_bytes_copied")
			moved := moveVerified(t, a, b, seg.ID, local, remote, seed, "")
			if got := pluginCounter(t, a, "shm", "foreign_bytes_copied") - shmBefore; got != moved {
				t.Errorf("shm copied %d bytes of app memory, want the %d moved", got, moved)
			}
			if got := pluginCounter(t, a, "tcp", "foreign_bytes_copied") - tcpBefore; got != 0 {
				t.Errorf("tcp copied %d bytes of app memory; shm should have carried them all", got)
			}
		})
	}
}

// TestForeignMemoryAtThePeerNotShm: a peer's app memory cannot be reached
// through shm (it has no memfd to hand over): a request pinned to shm is
// refused with a reason that says so and names what to do, and without a
// hint tcp carries it.
func TestForeignMemoryAtThePeerNotShm(t *testing.T) {
	const seed, span = 27, 1 << 20
	ctx := context.Background()
	a, b, seg := peerPair(t, "peer-app-shm", "--expose", fmt.Sprint(span), "--pattern", fmt.Sprint(seed), "--app-memory")
	remote := b.Ready.Buffers[0].Base
	local := localBuffer(t, ctx, a, span)
	_, err := a.Explain(host.Request{Op: host.Read, Local: local[:4096], Segment: seg.ID, Remote: remote, Transport: "shm"})
	if !errors.Is(err, host.ErrTransportUnavailable) || !strings.Contains(err.Error(), "unsupported") || !strings.Contains(err.Error(), "Engine.Allocate") {
		t.Errorf("shm hinted for the peer's app memory: %v, want ErrTransportUnavailable saying unsupported and naming Engine.Allocate", err)
	}
	err = a.Transfer(ctx, host.Request{Op: host.Read, Local: local, Segment: seg.ID, Remote: remote, Transport: "shm"})
	if !errors.Is(err, host.ErrTransportUnavailable) {
		t.Errorf("a transfer pinned to shm for the peer's app memory: %v, want ErrTransportUnavailable", err)
	}
	if err := a.Transfer(ctx, host.Request{Op: host.Read, Local: local, Segment: seg.ID, Remote: remote}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(local, pattern(span, 0, seed)) {
		t.Fatal("read of the peer's app memory: bytes differ from the peer's pattern")
	}
}

package host_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/plugins/simdev/simmem"
	"github.com/ferrydev/ferry/sdk"
)

// simdevConfig is an engine named name with tcp only (so that a staged
// request's network hop is tcp), the simulated device (plugins/simdev, a
// test tool standing in for a GPU) and a small staging pool. url, when
// set, is another engine's metastore to join.
func simdevConfig(name, url, simdev string) *config.Config {
	cfg := config.Default(name)
	if url != "" {
		cfg = joinConfig(name, url)
	}
	cfg.PluginDir = binDir
	cfg.Plugins = cfg.Plugins[:1] // tcp
	cfg.Devices = []config.Plugin{{Name: "simdev", Enabled: true, Body: []byte(simdev), BodyFile: "test", BodyLine: 1, BodyColumn: 1}}
	cfg.Staging = config.Staging{Pool: 8 << 20, SliceSize: 1 << 20, Depth: 3}
	return cfg
}

func newSimdevEngine(t *testing.T, name, url, simdev string) *host.Engine {
	t.Helper()
	e, err := host.New(context.Background(), simdevConfig(name, url, simdev))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// simBuffer is simulated device memory of engine e: allocated by its
// simdev plugin, mapped here through the handle as an application maps
// GPU memory with its own driver, and registered with perm.
type simBuffer struct {
	mem  host.DeviceMemory
	view []byte // the application's view, for filling and checking
	base uint64
}

func newSimBuffer(t *testing.T, e *host.Engine, kind string, n uint64, perm host.Perm) *simBuffer {
	t.Helper()
	ctx := context.Background()
	m, err := e.AllocateDevice(ctx, kind, n)
	if err != nil {
		t.Fatal(err)
	}
	mp, err := simmem.Open(m.Handle)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mp.Close() })
	base, err := e.RegisterDevice(ctx, host.DeviceBuffer{Addr: m.Addr, Length: n, Kind: kind}, perm)
	if err != nil {
		t.Fatal(err)
	}
	return &simBuffer{mem: m, view: mp.Bytes()[:n], base: base}
}

func (b *simBuffer) local(off, n uint64) []byte { return host.DeviceBytes(b.mem.Addr+off, n) }

// TestStagedDeviceTransfers moves verified bytes between simulated GPU
// memory of two engines over tcp, staged through host memory on both
// sides, and between GPU and host memory, in both directions, at sizes
// that are not multiples of the slice and at odd offsets.
func TestStagedDeviceTransfers(t *testing.T) {
	ctx := context.Background()
	a := newSimdevEngine(t, "stage-a", "", "")
	b := newSimdevEngine(t, "stage-b", a.MetastoreURL(), "")
	const n = 5<<20 + 4099
	src := newSimBuffer(t, a, "cuda:0", n+64, host.LocalOnly)
	back := newSimBuffer(t, a, "cuda:1", n+64, host.LocalOnly)
	dst := newSimBuffer(t, b, "cuda", n+64, host.RemoteReadWrite)
	hostMem, err := b.Allocate(n + 64)
	if err != nil {
		t.Fatal(err)
	}
	hostBase, err := b.Register(ctx, hostMem, host.RemoteReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	seg, err := a.OpenSegment(ctx, "stage-b")
	if err != nil {
		t.Fatal(err)
	}
	copy(src.view, pattern(len(src.view), 0, 41))

	check := func(t *testing.T, got, want []byte) {
		t.Helper()
		if !bytes.Equal(got, want) {
			t.Fatalf("bytes differ (sums %s, want %s)", sum(got), sum(want))
		}
	}
	t.Run("gpu to remote gpu", func(t *testing.T) {
		if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: src.local(3, n), Segment: seg.ID, Remote: dst.base + 7}); err != nil {
			t.Fatal(err)
		}
		check(t, dst.view[7:7+n], src.view[3:3+n])
	})
	t.Run("gpu from remote gpu", func(t *testing.T) {
		if err := a.Transfer(ctx, host.Request{Op: host.Read, Local: back.local(1, n), Segment: seg.ID, Remote: dst.base + 7}); err != nil {
			t.Fatal(err)
		}
		check(t, back.view[1:1+n], src.view[3:3+n])
	})
	t.Run("gpu to remote host", func(t *testing.T) {
		if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: src.local(0, n), Segment: seg.ID, Remote: hostBase + 5}); err != nil {
			t.Fatal(err)
		}
		check(t, hostMem[5:5+n], src.view[:n])
	})
	t.Run("host to remote gpu", func(t *testing.T) {
		local, err := a.Allocate(n)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Register(ctx, local, host.LocalOnly); err != nil {
			t.Fatal(err)
		}
		copy(local, pattern(n, 0, 42))
		if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: local, Segment: seg.ID, Remote: dst.base}); err != nil {
			t.Fatal(err)
		}
		check(t, dst.view[:n], local)
		clear(local)
		if err := a.Transfer(ctx, host.Request{Op: host.Read, Local: local, Segment: seg.ID, Remote: dst.base}); err != nil {
			t.Fatal(err)
		}
		check(t, local, dst.view[:n])
	})
	t.Run("explain names the staged path", func(t *testing.T) {
		text, err := a.Explain(host.Request{Op: host.Write, Local: src.local(0, n), Segment: seg.ID, Remote: dst.base})
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"memory cuda -> cuda", "staged", "cuda:0, device plugin simdev"} {
			if !strings.Contains(text, want) {
				t.Errorf("explanation lacks %q:\n%s", want, text)
			}
		}
	})
}

// TestDeviceBadInput: each wrong registration gets a clear error and
// leaves nothing registered.
func TestDeviceBadInput(t *testing.T) {
	ctx := context.Background()
	a := newSimdevEngine(t, "devbad-a", "", "")
	m, err := a.AllocateDevice(ctx, "cuda:1", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		buf  host.DeviceBuffer
		kind error
		msg  string
	}{
		{"not device memory", host.DeviceBuffer{Addr: 0x1000, Length: 4096, Kind: "cuda"}, host.ErrInvalid, "not device memory"},
		{"wrong device", host.DeviceBuffer{Addr: m.Addr, Length: 4096, Kind: "cuda:0"}, host.ErrInvalid, "is on cuda:1"},
		{"past the allocation", host.DeviceBuffer{Addr: m.Addr, Length: 2 << 20, Kind: "cuda:1"}, host.ErrInvalid, "not device memory"},
		{"no such kind", host.DeviceBuffer{Addr: m.Addr, Length: 4096, Kind: "rocm"}, host.ErrTransportUnavailable, "no device plugin serves rocm"},
		{"bad kind", host.DeviceBuffer{Addr: m.Addr, Length: 4096, Kind: "tpu:0"}, host.ErrInvalid, "want cuda, rocm"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := a.RegisterDevice(ctx, c.buf, host.RemoteReadWrite)
			if !errors.Is(err, c.kind) || err == nil || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("err = %v, want %v saying %q", err, c.kind, c.msg)
			}
		})
	}
	t.Run("handle of freed memory", func(t *testing.T) {
		f, err := a.AllocateDevice(ctx, "cuda:0", 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.FreeDevice(ctx, f); err != nil {
			t.Fatal(err)
		}
		h := f.Handle
		_, err = a.RegisterDevice(ctx, host.DeviceBuffer{Addr: f.Addr, Length: h.Length, Kind: "cuda:0", Handle: &h}, host.RemoteRead)
		if !errors.Is(err, host.ErrInvalid) || !errors.Is(err, sdk.ErrStaleHandle) {
			t.Fatalf("err = %v, want a stale handle", err)
		}
	})
	if n := len(host.DeviceRegions(a)); n != 0 {
		t.Fatalf("%d device regions registered after only bad registrations", n)
	}
	// A good one still works after them.
	if _, err := a.RegisterDevice(ctx, host.DeviceBuffer{Addr: m.Addr, Length: 4096, Kind: "cuda:1"}, host.RemoteRead); err != nil {
		t.Fatal(err)
	}
}

// TestDeviceKindNoPathServes: device memory at a peer that stages
// nothing, and a peer without device blocks, end INVALID with the reason.
func TestStagedRequestWithoutStaging(t *testing.T) {
	ctx := context.Background()
	a := newEngine(t, "nostage-a") // default config: cuda and rocm device blocks, no GPU here
	_, err := a.RegisterDevice(ctx, host.DeviceBuffer{Addr: 0x7e0000000000, Length: 4096, Kind: "cuda:0"}, host.RemoteRead)
	if !errors.Is(err, host.ErrTransportUnavailable) || !strings.Contains(err.Error(), "unavailable") {
		t.Fatalf("err = %v, want the cuda plugin's unavailability", err)
	}
}

// TestStagedHintNamesTheNetworkHop: a transport hint that cannot reach
// device memory names the transport of the staged request's network hop.
func TestStagedHintNamesTheNetworkHop(t *testing.T) {
	ctx := context.Background()
	a := newSimdevEngine(t, "hint-a", "", "")
	b := newSimdevEngine(t, "hint-b", a.MetastoreURL(), "")
	src := newSimBuffer(t, a, "cuda", 3<<20, host.LocalOnly)
	dst := newSimBuffer(t, b, "cuda", 3<<20, host.RemoteReadWrite)
	copy(src.view, pattern(len(src.view), 0, 5))
	seg, err := a.OpenSegment(ctx, "hint-b")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: src.local(0, 3<<20), Segment: seg.ID, Remote: dst.base, Transport: "tcp"}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst.view, src.view) {
		t.Fatal("bytes differ")
	}
}

// TestDeviceMemoryNoPathServes: device memory that neither a transport
// nor staging can reach (the hint pins shm, and the peer is on another
// machine) is INVALID, saying why for both.
func TestDeviceMemoryNoPathServes(t *testing.T) {
	ctx := context.Background()
	cfgA := simdevConfig("nopath-a", "", "")
	cfgA.Plugins = config.Default("x").Plugins // tcp and shm
	a, err := host.New(ctx, cfgA)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	cfgB := simdevConfig("nopath-b", a.MetastoreURL(), "")
	cfgB.MachineID = "another-machine"
	b, err := host.New(ctx, cfgB)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	src := newSimBuffer(t, a, "cuda", 1<<20, host.LocalOnly)
	dst := newSimBuffer(t, b, "cuda", 1<<20, host.RemoteReadWrite)
	seg, err := a.OpenSegment(ctx, "nopath-b")
	if err != nil {
		t.Fatal(err)
	}
	req := host.Request{Op: host.Write, Local: src.local(0, 4096), Segment: seg.ID, Remote: dst.base, Transport: "shm"}
	err = a.Transfer(ctx, req)
	var te *host.TransferError
	if !errors.As(err, &te) || te.State != host.StateInvalid || !strings.Contains(err.Error(), "staged through host memory") ||
		!strings.Contains(err.Error(), "same machine") {
		t.Fatalf("err = %v, want INVALID saying neither a transport nor staging reaches it", err)
	}
	if _, err := a.Explain(req); err == nil {
		t.Fatal("explain found a path")
	}
}

// TestStagingPoolExhausted: with the one slot of the pool held by a slow
// staged request, another waits within its deadline and ends TIMEOUT,
// saying the pool was exhausted; the first completes.
func TestStagingPoolExhausted(t *testing.T) {
	ctx := context.Background()
	cfg := simdevConfig("pool-a", "", `copy_bandwidth = "4MB/s"`)
	cfg.Staging = config.Staging{Pool: 1 << 20, SliceSize: 1 << 20, Depth: 1}
	a, err := host.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	src := newSimBuffer(t, a, "cuda", 2<<20, host.LocalOnly)
	dstMem, err := a.Allocate(2 << 20)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := a.Register(ctx, dstMem, host.RemoteReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	seg, err := a.OpenSegment(ctx, "pool-a")
	if err != nil {
		t.Fatal(err)
	}
	copy(src.view, pattern(len(src.view), 0, 9))
	slow := make(chan error, 1)
	go func() {
		slow <- a.Transfer(ctx, host.Request{Op: host.Write, Local: src.local(0, 2<<20), Segment: seg.ID, Remote: dst})
	}()
	waitFor(t, 10*time.Second, "the slow request to take the pool's slot", func() bool { return host.StagingSlotsInUse(a) == 1 })
	err = a.Transfer(ctx, host.Request{Op: host.Write, Local: src.local(0, 4096), Segment: seg.ID, Remote: dst, Deadline: time.Now().Add(100 * time.Millisecond)})
	var te *host.TransferError
	if !errors.As(err, &te) || te.State != host.StateTimeout || !strings.Contains(err.Error(), "staging pool exhausted") {
		t.Fatalf("err = %v, want TIMEOUT with the pool exhausted", err)
	}
	if err := <-slow; err != nil {
		t.Fatalf("the slow request: %v", err)
	}
	if !bytes.Equal(dstMem, src.view) {
		t.Fatal("the slow request's bytes differ")
	}
}

// TestStagedDevicePluginKilled: the device plugin killed (kill -9) under
// a staged request ends it FAILED naming the device hop, or COMPLETED,
// never a hang; the plugin is started again on next use.
func TestStagedDevicePluginKilled(t *testing.T) {
	ctx := context.Background()
	a := newSimdevEngine(t, "kill-a", "", `copy_bandwidth = "20MB/s"`)
	b := newSimdevEngine(t, "kill-b", a.MetastoreURL(), "")
	src := newSimBuffer(t, a, "cuda", 8<<20, host.LocalOnly)
	dst := newSimBuffer(t, b, "cuda", 8<<20, host.RemoteReadWrite)
	seg, err := a.OpenSegment(ctx, "kill-b")
	if err != nil {
		t.Fatal(err)
	}
	pid := host.DevicePID(a, "simdev")
	done := make(chan error, 1)
	go func() {
		done <- a.Transfer(ctx, host.Request{Op: host.Write, Local: src.local(0, 8<<20), Segment: seg.ID, Remote: dst.base})
	}()
	waitFor(t, 10*time.Second, "the staged request to start", func() bool { return host.StagingSlotsInUse(a) > 0 })
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the staged request did not end after its device plugin was killed")
	}
	if err == nil {
		t.Fatal("completed although the plugin that owned the source memory died (its simulated memory went with it)")
	}
	var te *host.TransferError
	if !errors.As(err, &te) || te.State != host.StateFailed || !strings.Contains(err.Error(), "device plugin simdev") {
		t.Fatalf("err = %v, want FAILED naming the device plugin", err)
	}
	// Started again on next use: the lost memory is unregistered, and
	// new device memory moves.
	if err := a.UnregisterDevice(ctx, src.base); err != nil {
		t.Fatal(err)
	}
	src2 := newSimBuffer(t, a, "cuda", 1<<20, host.LocalOnly)
	copy(src2.view, pattern(len(src2.view), 0, 3))
	if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: src2.local(0, 1<<20), Segment: seg.ID, Remote: dst.base}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst.view[:1<<20], src2.view) {
		t.Fatal("bytes differ after the restart")
	}
	if host.DevicePID(a, "simdev") == pid {
		t.Fatal("the same device plugin process after the kill")
	}
}

// TestNvlinkMovesDeviceMemoryDirectly: with plugins/nvlink configured,
// device memory of two engines on one machine moves through it (its
// simulated backend opens the simulated device's handles), not staged.
func TestNvlinkMovesDeviceMemoryDirectly(t *testing.T) {
	ctx := context.Background()
	withNvlink := func(cfg *config.Config) *config.Config {
		cfg.Plugins = append(cfg.Plugins, config.Plugin{Name: "nvlink", Enabled: true, BodyFile: "test", BodyLine: 1, BodyColumn: 1})
		return cfg
	}
	a, err := host.New(ctx, withNvlink(simdevConfig("nvl-a", "", "")))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := host.New(ctx, withNvlink(simdevConfig("nvl-b", a.MetastoreURL(), "")))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const n = 9<<20 + 13
	src := newSimBuffer(t, a, "cuda:0", n, host.LocalOnly)
	dst := newSimBuffer(t, b, "cuda:1", n, host.RemoteReadWrite)
	copy(src.view, pattern(n, 0, 77))
	seg, err := a.OpenSegment(ctx, "nvl-b")
	if err != nil {
		t.Fatal(err)
	}
	req := host.Request{Op: host.Write, Local: src.local(0, n), Segment: seg.ID, Remote: dst.base}
	text, err := a.Explain(req)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "nvlink: taken") || strings.Contains(text, "staged") {
		t.Fatalf("want nvlink taken and nothing staged:\n%s", text)
	}
	if err := a.Transfer(ctx, req); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst.view, src.view) {
		t.Fatal("bytes differ")
	}
	clear(src.view)
	if err := a.Transfer(ctx, host.Request{Op: host.Read, Local: src.local(0, n), Segment: seg.ID, Remote: dst.base}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst.view, src.view) {
		t.Fatal("bytes differ after the read back")
	}
}

// TestStagedBlocks: a KV cache of simulated GPU memory, in layers, moves
// block-indexed (PrepareBlocks, SubmitBlocks) to another engine's GPU
// memory over tcp, each run staged; the blocks land, nothing else does.
func TestStagedBlocks(t *testing.T) {
	ctx := context.Background()
	a := newSimdevEngine(t, "sblk-a", "", "")
	b := newSimdevEngine(t, "sblk-b", a.MetastoreURL(), "")
	const bs = 16 << 10
	ll := host.BlockLayout{BlockSize: bs, Blocks: 32, Layers: 4, LayerStride: 32 * bs}
	rl := host.BlockLayout{BlockSize: bs, Blocks: 128}
	src := newSimBuffer(t, a, "cuda:0", 128*bs, host.LocalOnly)
	dst := newSimBuffer(t, b, "cuda:1", 128*bs, host.RemoteReadWrite)
	copy(src.view, pattern(len(src.view), 0, 21))
	seg, err := a.OpenSegment(ctx, "sblk-b")
	if err != nil {
		t.Fatal(err)
	}
	list, err := a.PrepareBlocks(seg.ID, src.local(0, 128*bs), ll, dst.base, rl)
	if err != nil {
		t.Fatal(err)
	}
	pairs := []host.BlockPair{{Local: 0, Remote: 10}, {Local: 1, Remote: 11}, {Local: 2, Remote: 12}, {Local: 40, Remote: 3}, {Local: 100, Remote: 127}}
	id, err := a.AllocateBatch(len(pairs))
	if err != nil {
		t.Fatal(err)
	}
	defer a.FreeBatch(id)
	if _, err := a.SubmitBlocks(id, list, host.BlockRequest{Op: host.Write}, pairs); err != nil {
		t.Fatal(err)
	}
	if err := a.Wait(ctx, id); err != nil {
		t.Fatal(err)
	}
	st, err := a.BatchStatus(id)
	if err != nil || st.Completed != st.Tasks || st.Bytes != uint64(len(pairs))*bs {
		t.Fatalf("batch %+v, %v: want every task COMPLETED with its bytes counted", st, err)
	}
	want := make([]byte, len(dst.view))
	for _, p := range pairs {
		copy(want[int(p.Remote)*bs:int(p.Remote+1)*bs], src.view[int(p.Local)*bs:int(p.Local+1)*bs])
	}
	if !bytes.Equal(dst.view, want) {
		t.Fatal("the target differs from the blocks written (or more was written)")
	}
}

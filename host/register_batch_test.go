package host_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/segment"
)

const batchBlock = 4096

// kvBlocks allocates n blocks of batchBlock bytes, back to back, and
// returns them.
func kvBlocks(t testing.TB, e *host.Engine, n int) [][]byte {
	t.Helper()
	mem, err := e.Allocate(n * batchBlock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Free(mem) })
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = mem[i*batchBlock : (i+1)*batchBlock : (i+1)*batchBlock]
	}
	return bufs
}

// openSeeing opens segment name from b and checks that it holds n
// buffers.
func openSeeing(t *testing.T, ctx context.Context, b *host.Engine, name string, n int) host.Segment {
	t.Helper()
	seg, err := b.OpenSegment(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(seg.Buffers) != n {
		t.Fatalf("the peer sees %d buffers, want %d", len(seg.Buffers), n)
	}
	return seg
}

// unregisterBatchOnce unregisters bufs from a in one call and checks that
// it published once and left no buffer registered.
func unregisterBatchOnce(t *testing.T, ctx context.Context, a *host.Engine, bufs [][]byte) {
	t.Helper()
	writes := host.PublishWrites(a)
	if err := a.UnregisterBatch(ctx, bufs); err != nil {
		t.Fatal(err)
	}
	if w := host.PublishWrites(a) - writes; w != 1 || host.RegisteredBuffers(a) != 0 {
		t.Fatalf("UnregisterBatch published %d times and left %d buffers, want once and none", w, host.RegisteredBuffers(a))
	}
}

// pluginRegions is how many regions each plugin of e holds, as the SDK
// counts them.
func pluginRegions(t *testing.T, e *host.Engine) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, p := range e.Status(context.Background()).Plugins {
		if p.Counters == nil {
			t.Fatalf("plugin %s gave no counters", p.Name)
		}
		out[p.Name] = p.Counters["regions_registered"]
	}
	return out
}

// TestRegisterTenThousandBuffers registers 10,000 buffers in one call
// with the tcp and shm plugins running: one publication, a descriptor
// under 1 MiB, and a peer that writes verified bytes into a few of them
// over each transport.
func TestRegisterTenThousandBuffers(t *testing.T) {
	const n = 10000
	ctx := context.Background()
	a := newEngine(t, "batch10k-a")
	bufs := kvBlocks(t, a, n)
	writes := host.PublishWrites(a)
	addrs, err := a.RegisterBatch(ctx, bufs, []host.Perm{host.RemoteReadWrite})
	if err != nil {
		t.Fatal(err)
	}
	if w := host.PublishWrites(a) - writes; w != 1 {
		t.Fatalf("RegisterBatch of %d buffers published %d times, want once", n, w)
	}
	for name, got := range pluginRegions(t, a) {
		if got != n {
			t.Fatalf("plugin %s holds %d regions, want %d", name, got, n)
		}
	}

	key := segment.Key(config.DefaultMetastorePrefix, "batch10k-a")
	code, raw := metaDo(t, http.MethodGet, a.MetastoreURL(), key, nil)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d", key, code)
	}
	t.Logf("descriptor of %d buffers: %d bytes", n, len(raw))
	if len(raw) >= 1<<20 {
		t.Fatalf("descriptor of %d buffers is %d bytes, want under 1 MiB", n, len(raw))
	}

	b := newJoinedEngine(t, "batch10k-b", a.MetastoreURL())
	seg := openSeeing(t, ctx, b, "batch10k-a", n)
	if len(seg.Transports) < 2 {
		t.Fatalf("segment offers %v, want tcp and shm", seg.Transports)
	}
	src, srcAddr := remoteBuffer(t, ctx, b, batchBlock)
	for _, tr := range seg.Transports {
		for _, i := range []int{0, 1, 4321, n - 1} {
			rand.Read(src)
			off := i % 100 // a few bytes in
			if err := b.Transfer(ctx, host.Request{Op: host.Write, Local: src[:batchBlock-off], Segment: seg.ID, Remote: addrs[i] + uint64(off), Transport: tr}); err != nil {
				t.Fatalf("%s: write into buffer %d: %v", tr, i, err)
			}
			if !bytes.Equal(bufs[i][off:], src[:batchBlock-off]) {
				t.Fatalf("%s: buffer %d does not hold the bytes the peer wrote", tr, i)
			}
		}
		// One byte past a buffer is another buffer: a transfer across the
		// boundary is refused by address, not written.
		err := b.Transfer(ctx, host.Request{Op: host.Write, Local: src[:2], Segment: seg.ID, Remote: addrs[7] + batchBlock - 1, Transport: tr})
		if !errors.Is(err, host.ErrOutOfBounds) {
			t.Fatalf("%s: a write across two buffers: %v, want ErrOutOfBounds", tr, err)
		}
	}

	// A restarted plugin gets all 10,000 again (in one call) and moves
	// bytes out of them: a writes from its last buffer into b's, over the
	// new tcp process.
	pid := host.PluginPID(a, "tcp")
	restartWrite := host.PublishWrites(a) + 1 // the restart republishes once
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitBack(t, a, "tcp", 0)
	for deadline := time.Now().Add(30 * time.Second); host.PublishWrites(a) < restartWrite; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the engine did not republish its descriptor after the tcp restart")
		}
	}
	if got := pluginStatus(a, "tcp").Counters["regions_registered"]; got != n {
		t.Fatalf("the restarted tcp plugin holds %d regions, want %d", got, n)
	}
	segB, err := a.OpenSegment(ctx, "batch10k-b")
	if err != nil {
		t.Fatal(err)
	}
	rand.Read(bufs[n-1])
	if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: bufs[n-1], Segment: segB.ID, Remote: srcAddr, Transport: "tcp"}); err != nil {
		t.Fatalf("write from a replayed buffer over the restarted tcp plugin: %v", err)
	}
	if !bytes.Equal(src, bufs[n-1]) {
		t.Fatal("the peer does not hold the bytes written from a replayed buffer")
	}

	unregisterBatchOnce(t, ctx, a, bufs)
	for name, got := range pluginRegions(t, a) {
		if got != 0 {
			t.Fatalf("plugin %s still holds %d regions", name, got)
		}
	}
}

// A batch with one bad buffer registers none of its buffers, in the
// engine or in any plugin, and publishes nothing.
func TestRegisterBatchRollsBack(t *testing.T) {
	ctx := context.Background()
	a := newEngine(t, "batchbad-a")
	bufs := kvBlocks(t, a, 1000)
	if _, err := a.Register(ctx, bufs[500], host.RemoteRead); err != nil {
		t.Fatal(err)
	}
	// Starts 100 bytes before the allocation and runs into it.
	across := unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(&bufs[0][0]), -100)), 200)
	cases := []struct {
		name  string
		batch [][]byte
		perms []host.Perm
		want  error
		says  string
	}{
		{"overlaps a registered buffer", bufs, []host.Perm{host.RemoteRead}, host.ErrInvalid, "buffer 500"},
		{"overlaps another of the batch", [][]byte{bufs[1], bufs[2], bufs[2][10:20]}, []host.Perm{host.RemoteRead}, host.ErrInvalid, "overlap"},
		{"across an allocation's edge", [][]byte{bufs[1], across}, []host.Perm{host.RemoteRead}, host.ErrInvalid, "buffer 1"},
		{"empty", [][]byte{bufs[1], {}}, []host.Perm{host.RemoteRead}, host.ErrInvalid, "buffer 1 is empty"},
		{"bad permission", [][]byte{bufs[1], bufs[2]}, []host.Perm{host.RemoteRead, 99}, host.ErrInvalid, "buffer 1: unknown permission"},
		{"permissions miscounted", [][]byte{bufs[1], bufs[2], bufs[3]}, []host.Perm{host.RemoteRead, host.RemoteRead}, host.ErrInvalid, "2 permissions for 3 buffers"},
	}
	before := pluginRegions(t, a)
	writes := host.PublishWrites(a)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := a.RegisterBatch(ctx, c.batch, c.perms)
			if !errors.Is(err, c.want) || !bytes.Contains([]byte(err.Error()), []byte(c.says)) {
				t.Fatalf("err = %v, want %v saying %q", err, c.want, c.says)
			}
			if n := host.RegisteredBuffers(a); n != 1 {
				t.Fatalf("%d buffers registered after the refusal, want the 1 from before", n)
			}
			if got := pluginRegions(t, a); fmt.Sprint(got) != fmt.Sprint(before) {
				t.Fatalf("plugins hold %v regions after the refusal, %v before", got, before)
			}
			if w := host.PublishWrites(a); w != writes {
				t.Fatalf("a refused batch published %d times", w-writes)
			}
		})
	}
	// Unregistering with one unknown buffer removes none.
	if err := a.UnregisterBatch(ctx, [][]byte{bufs[500], bufs[501]}); !errors.Is(err, host.ErrNotRegistered) || host.RegisteredBuffers(a) != 1 {
		t.Fatalf("UnregisterBatch with an unregistered buffer: %v, %d left; want ErrNotRegistered and nothing removed", err, host.RegisteredBuffers(a))
	}
}

// Concurrent Registers share descriptor writes, and each returns only
// once the descriptor in the metastore lists its buffer.
func TestConcurrentRegisterIsVisibleOnReturn(t *testing.T) {
	const n = 64
	ctx := context.Background()
	a := newEngine(t, "burst-a")
	bufs := kvBlocks(t, a, n)
	key := segment.Key(config.DefaultMetastorePrefix, "burst-a")
	writes := host.PublishWrites(a)
	errs := make(chan error, n)
	for _, buf := range bufs {
		go func() {
			p, err := a.Register(ctx, buf, host.RemoteRead)
			if err != nil {
				errs <- err
				return
			}
			d, err := getDescriptor(a.MetastoreURL(), key)
			if err != nil {
				errs <- err
				return
			}
			if segment.Find(d.Buffers, p) < 0 {
				errs <- fmt.Errorf("Register of %#x returned before the metastore's descriptor listed it", p)
				return
			}
			errs <- nil
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d concurrent Registers wrote the descriptor %d times", n, host.PublishWrites(a)-writes)
}

// getDescriptor reads and decodes the descriptor at key of the HTTP
// metastore at base; safe off the test's goroutine.
func getDescriptor(base, key string) (*segment.Descriptor, error) {
	resp, err := http.Get(base + "?" + url.Values{"key": {key}}.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s, %v", key, resp.Status, err)
	}
	return segment.Decode(key, raw)
}

func newJoinedEngine(t testing.TB, name, url string) *host.Engine {
	t.Helper()
	e, err := host.New(context.Background(), joinConfig(name, url))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// BenchmarkRegisterBatch registers and unregisters 1,000 and 10,000
// buffers of 4 KiB in one call each, with the tcp and shm plugins
// running (ms/register: the RegisterBatch call alone); "one-by-one" does
// 1,000 with Register and Unregister, for comparison.
func BenchmarkRegisterBatch(b *testing.B) {
	ctx := context.Background()
	cfg := config.Default("bench-batch")
	cfg.PluginDir = binDir
	e, err := host.New(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	for _, n := range []int{1000, 10000} {
		bufs := kvBlocks(b, e, n)
		b.Run(fmt.Sprintf("batch/n=%d", n), func(b *testing.B) {
			var reg time.Duration
			for b.Loop() {
				start := time.Now()
				if _, err := e.RegisterBatch(ctx, bufs, []host.Perm{host.RemoteReadWrite}); err != nil {
					b.Fatal(err)
				}
				reg += time.Since(start)
				if err := e.UnregisterBatch(ctx, bufs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/buffer")
			b.ReportMetric(float64(reg.Milliseconds())/float64(b.N), "ms/register")
		})
	}
	bufs := kvBlocks(b, e, 1000)
	b.Run("one-by-one/n=1000", func(b *testing.B) {
		for b.Loop() {
			for _, buf := range bufs {
				if _, err := e.Register(ctx, buf, host.RemoteReadWrite); err != nil {
					b.Fatal(err)
				}
			}
			for _, buf := range bufs {
				if err := e.Unregister(ctx, buf); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "ns/buffer")
	})
}

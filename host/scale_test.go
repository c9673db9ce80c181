package host_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host/control"
	"github.com/ferrydev/ferry/host/segment"
)

// rssKiB returns the resident set of process pid ("self" for this one)
// in KiB, as /proc says.
func rssKiB(t *testing.T, pid string) int64 {
	t.Helper()
	f, err := os.Open("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no VmRSS in /proc/%s/status", pid)
	return 0
}

// settle collects garbage and returns freed memory to the system, so
// that RSS shows what is kept, and returns the live heap in bytes.
func settle() uint64 {
	runtime.GC()
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestThousandOpenSegments opens 1,000 remote segments, each with 100
// buffers and the endpoints of a real peer's tcp and shm plugins, through
// blobs, and reports what they cost: the host's RSS and live heap, and
// each plugin's RSS. The host's RSS grows by under 100 MiB (issue 12,
// item 6); under the race detector, whose shadow memory inflates RSS,
// the live heap is held to the bound instead. The 1,000 segments are one
// peer's descriptor under 1,000 names and incarnations: opening costs the
// same whatever answers, and the plugins connect on first use.
func TestThousandOpenSegments(t *testing.T) {
	const segments, buffers = 1000, 100
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	a, b := blobEngine(t, "scale-a", ""), blobEngine(t, "scale-b", "")
	c, err := control.Dial(b.ControlAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := c.Descriptor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d, err := segment.Decode("scale-b", raw)
	if err != nil {
		t.Fatal(err)
	}
	blob := func(i int) []byte {
		d.Name, d.Incarnation = fmt.Sprintf("scale-peer-%04d", i), uint64(i+1)
		d.Buffers = make([]segment.Buffer, buffers)
		for j := range d.Buffers {
			d.Buffers[j] = segment.Buffer{Region: uint32(j + 1), Base: 0x7f0000000000 + uint64(j)<<21, Length: 2 << 20, Perm: segment.PermRemoteReadWrite, Location: "cpu"}
		}
		b, err := segment.EncodeBlob(nil, d)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	pids := map[string]string{}
	for _, p := range a.Status(ctx).Plugins {
		if p.PID != 0 {
			pids[p.Name] = strconv.Itoa(p.PID)
		}
	}
	// One import first, so that what every open uses once (gRPC
	// streams, the plugins' peer tables) is in the baseline.
	if _, err := a.ImportSegment(ctx, blob(0)); err != nil {
		t.Fatal(err)
	}
	heap0, rss0 := settle(), rssKiB(t, "self")
	plug0 := map[string]int64{}
	for n, pid := range pids {
		plug0[n] = rssKiB(t, pid)
	}
	start := time.Now()
	for i := 1; i < segments; i++ {
		s, err := a.ImportSegment(ctx, blob(i))
		if err != nil {
			t.Fatalf("segment %d: %v", i, err)
		}
		if len(s.Transports) < 2 {
			t.Fatalf("segment %d opened on %v, want tcp and shm", i, s.Transports)
		}
	}
	took := time.Since(start)
	heap1, rss1 := settle(), rssKiB(t, "self")
	dRSS, dHeap := (rss1-rss0)<<10, int64(heap1)-int64(heap0)
	t.Logf("%d more open segments of %d buffers: host RSS %+.1f MiB (%.1f KiB each), live heap %+.1f MiB, %v to open (race detector: %v)",
		segments-1, buffers, mib(dRSS), float64(dRSS)/1024/float64(segments-1), mib(dHeap), took.Round(time.Millisecond), raceEnabled)
	for n, pid := range pids {
		t.Logf("plugin %s RSS %+.1f MiB", n, mib((rssKiB(t, pid)-plug0[n])<<10))
	}
	const bound = 100 << 20
	if dHeap > bound {
		t.Errorf("the live heap grew by %.1f MiB for %d open segments, over the 100 MiB bound", mib(dHeap), segments-1)
	}
	if !raceEnabled && dRSS > bound {
		t.Errorf("the host's RSS grew by %.1f MiB for %d open segments, over the 100 MiB bound", mib(dRSS), segments-1)
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

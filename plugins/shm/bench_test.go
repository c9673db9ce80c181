package shm_test

import (
	"fmt"
	"testing"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
	sdkshm "github.com/ferrydev/ferry/sdk/shm"
)

// chanCompleter hands completions to the benchmark loop without allocating.
type chanCompleter chan ring.Status

func (c chanCompleter) Complete(_ uint64, st ring.Status, _ uint64) { c <- st }

// BenchmarkWrite64MiB writes 64 MiB from one engine's memfd region into a
// peer's, in-process, one descriptor at a time ("shm"), next to a
// single-thread copy() of the same size between two memfd mappings
// ("copy-1thread"), the baseline the issue compares against.
func BenchmarkWrite64MiB(b *testing.B) {
	const size = 64 << 20
	b.Run("shm", func(b *testing.B) { benchWrites(b, size) })
	b.Run("copy-1thread", func(b *testing.B) {
		src, err := sdkshm.Create("bench-copy-src", size)
		if err != nil {
			b.Fatal(err)
		}
		defer src.Close()
		dst, err := sdkshm.Create("bench-copy-dst", size)
		if err != nil {
			b.Fatal(err)
		}
		defer dst.Close()
		s, d := src.Mem(), dst.Mem()
		copy(d, s) // fault the pages in, as the shm case's warm-up does
		b.SetBytes(size)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			copy(d, s)
		}
	})
}

// BenchmarkWrite writes one descriptor at a time from a memfd region into
// a peer's, in-process (no lane, no process wakeup): the plugin's own
// cost per request, around the sizes where the copy changes its way
// (below 1 MiB copy; from 1 MiB sdk/memcpy keeps it in cache; 64 MiB is
// split over the workers with non-temporal stores).
func BenchmarkWrite(b *testing.B) {
	for _, size := range []uint64{64 << 10, 1 << 20, 4 << 20, 64 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) { benchWrites(b, size) })
	}
}

// benchWrites writes size bytes from a written memfd region of one
// engine into a written region of a peer's, in-process, one descriptor at
// a time, after one write that maps the peer's region.
func benchWrites(b *testing.B, size uint64) {
	a := startEngine(b, "bench-a", 1, "")
	t := startEngine(b, "bench-b", 2, "")
	fill(a.region(b, 1, int(size), sdk.PermLocal, "bench-src"), 1)
	fill(t.region(b, 1, int(size), sdk.PermRemoteReadWrite, "bench-dst"), 2)
	a.open(b, 1, t)
	done := make(chanCompleter, 1)
	d := ring.Descriptor{Op: ring.OpWrite, Peer: 1, LocalRegion: 1, RemoteRegion: 1, Length: size}
	a.tr.Submit(&d, done) // warm up: map the peer's region
	if st := <-done; st != ring.StatusOK {
		b.Fatal(st)
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		d.Token = uint64(i)
		a.tr.Submit(&d, done)
		if st := <-done; st != ring.StatusOK {
			b.Fatalf("write %d bytes: %v", size, st)
		}
	}
}

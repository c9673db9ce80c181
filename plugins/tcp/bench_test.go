package tcp_test

import (
	"testing"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// chanCompleter hands completions to the benchmark loop without allocating.
type chanCompleter chan ring.Status

func (c chanCompleter) Complete(_ uint64, st ring.Status, _ uint64) { c <- st }

// benchTransfer keeps window descriptors of size bytes in flight from A to B.
func benchTransfer(b *testing.B, op ring.Op, size uint64, window int) {
	benchTransferMem(b, op, size, window, false)
}

// benchTransferMem is benchTransfer; with foreign, A's memory is
// registered as memory the application allocated itself, so every
// descriptor pays the extra copy through a bounce buffer.
func benchTransferMem(b *testing.B, op ring.Op, size uint64, window int, foreign bool) {
	const regionSize = 128 << 20
	a := startEngine(b, "bench-a", 1, "")
	t := startEngine(b, "bench-b", 2, "")
	src, dst := make([]byte, regionSize), make([]byte, regionSize)
	if foreign {
		a.registerForeign(b, 1, src, sdk.PermLocal)
	} else {
		a.register(b, 1, src, sdk.PermLocal)
	}
	t.register(b, 1, dst, sdk.PermRemoteReadWrite)
	a.open(b, 1, t)
	done := make(chanCompleter, window)
	slots := uint64(regionSize / size)
	d := ring.Descriptor{Op: op, Peer: 1, LocalRegion: 1, RemoteRegion: 1, Length: size}
	check := func(st ring.Status) {
		if st != ring.StatusOK {
			b.Fatalf("status %v", st)
		}
	}
	// Warm up: dial the connections and fill the pools.
	for i := range window {
		d.Token = uint64(i)
		a.tr.Submit(&d, done)
	}
	for range window {
		check(<-done)
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	inflight := 0
	for i := 0; i < b.N; i++ {
		if inflight == window {
			check(<-done)
			inflight--
		}
		off := (uint64(i) % slots) * size
		d.Token, d.LocalOffset, d.RemoteOffset = uint64(i), off, off
		a.tr.Submit(&d, done)
		inflight++
	}
	for ; inflight > 0; inflight-- {
		check(<-done)
	}
}

func BenchmarkWrite4KiB(b *testing.B)  { benchTransfer(b, ring.OpWrite, 4<<10, 128) }
func BenchmarkWrite64MiB(b *testing.B) { benchTransfer(b, ring.OpWrite, 64<<20, 2) }
func BenchmarkRead4KiB(b *testing.B)   { benchTransfer(b, ring.OpRead, 4<<10, 128) }
func BenchmarkRead64MiB(b *testing.B)  { benchTransfer(b, ring.OpRead, 64<<20, 2) }

// The extra copy of memory the application allocated itself, against the
// rows above.
func BenchmarkForeignWrite4KiB(b *testing.B) { benchTransferMem(b, ring.OpWrite, 4<<10, 128, true) }
func BenchmarkForeignWrite1MiB(b *testing.B) { benchTransferMem(b, ring.OpWrite, 1<<20, 8, true) }
func BenchmarkForeignRead4KiB(b *testing.B)  { benchTransferMem(b, ring.OpRead, 4<<10, 128, true) }
func BenchmarkForeignRead1MiB(b *testing.B)  { benchTransferMem(b, ring.OpRead, 1<<20, 8, true) }
func BenchmarkWrite1MiB(b *testing.B)        { benchTransfer(b, ring.OpWrite, 1<<20, 8) }
func BenchmarkRead1MiB(b *testing.B)         { benchTransfer(b, ring.OpRead, 1<<20, 8) }

package memcpy

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ferrydev/ferry/sdk/memcpy/internal/libc"
)

// BenchmarkCopy compares Go's copy, Copy and the C library's memcpy on
// buffers written before the clock starts (the destination already
// faulted in), with the destination 16-byte aligned and one byte off
// (on Intel CPUs with ERMS and FSRM memmove takes REP MOVS only for the
// aligned one; AMD CPUs take the AVX path for both). The three run one
// after the other for each size, so that run-to-run drift hits them alike:
//
//	go test -c -o /tmp/memcpy.test ./sdk/memcpy
//	for i in 1 2 3 4 5; do /tmp/memcpy.test -test.run '^$' -test.bench Copy -test.benchtime 0.3s; done
func BenchmarkCopy(b *testing.B) {
	for _, sz := range benchSizes {
		for _, doff := range []int{0, 1} {
			s, d := benchBuffers(sz.n, doff)
			for _, im := range benchImpls {
				b.Run(fmt.Sprintf("%s/dst+%d/%s", sz.name, doff, im.name), func(b *testing.B) {
					if im.name == "libc" && !libc.Available {
						b.Skip("libc's memcpy needs a cgo build")
					}
					b.SetBytes(int64(sz.n))
					for b.Loop() {
						im.f(d, s)
					}
				})
			}
		}
	}
}

// benchBuffers returns a written source of n bytes and a written
// destination of n bytes that starts doff bytes into its allocation.
func benchBuffers(n, doff int) (src, dst []byte) {
	s := make([]byte, n+64)
	d := make([]byte, n+64)
	fill(s, 1)
	fill(d, 2)
	return s[:n], d[doff : doff+n]
}

var benchSizes = []struct {
	name string
	n    int
}{
	{"32K", 32 << 10}, {"64K", 64 << 10}, {"256K", 256 << 10}, {"512K", 512 << 10}, {"1M-1", 1<<20 - 1}, {"1M", 1 << 20},
	{"2M", 2 << 20}, {"4M", 4 << 20}, {"8M", 8 << 20}, {"16M", 16 << 20}, {"32M", 32 << 20}, {"64M", 64 << 20},
}

var benchImpls = []struct {
	name string
	f    func(dst, src []byte)
}{
	{"go", func(d, s []byte) { copy(d, s) }},
	{"ferry", func(d, s []byte) { Copy(d, s) }},
	{"libc", libc.Memcpy},
}

// BenchmarkInterleaved is BenchmarkCopy for a shared, loaded machine:
// each of b.N rounds times go, ferry and libc in turn (the first
// rotating) on about 32 MiB of
// copying each, so that a burst of load from elsewhere hits all three
// alike, and it reports each one's median and best round in GB/s (the
// best round is the one the load disturbed least):
//
//	/tmp/memcpy.test -test.run '^$' -test.bench Interleaved -test.benchtime 15x -test.count 5
func BenchmarkInterleaved(b *testing.B) {
	if !libc.Available {
		b.Skip("libc's memcpy needs a cgo build")
	}
	for _, sz := range benchSizes {
		for _, doff := range []int{0, 1} {
			s, d := benchBuffers(sz.n, doff)
			reps := max(1, (32<<20)/sz.n)
			b.Run(fmt.Sprintf("%s/dst+%d", sz.name, doff), func(b *testing.B) {
				gbs := make([][]float64, len(benchImpls))
				round := 0
				for b.Loop() {
					round++
					for k := range benchImpls {
						i := (k + round) % len(benchImpls) // who goes first rotates
						im := benchImpls[i]
						start := time.Now()
						for range reps {
							im.f(d, s)
						}
						gbs[i] = append(gbs[i], float64(reps*sz.n)/float64(time.Since(start).Nanoseconds()))
					}
				}
				for i, im := range benchImpls {
					slices.Sort(gbs[i])
					b.ReportMetric(gbs[i][len(gbs[i])/2], im.name+"-GB/s")
					b.ReportMetric(gbs[i][len(gbs[i])-1], im.name+"-best-GB/s")
				}
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

package blocks

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

// region is a registered range in a fake registry.
type region struct {
	id         uint32
	base, size uint64
}

var errNotThere = errors.New("not inside one region")

// finder looks ranges up in regions, as the local registry or a
// descriptor would.
func finder(regions ...region) Finder {
	return func(addr, n uint64) (Place, error) {
		for _, r := range regions {
			if addr >= r.base && addr+n <= r.base+r.size {
				return Place{Region: r.id, Offset: addr - r.base}, nil
			}
		}
		return Place{}, fmt.Errorf("%#x+%d: %w", addr, n, errNotThere)
	}
}

func TestLayoutCheck(t *testing.T) {
	for _, c := range []struct {
		name string
		l    Layout
		want string // "" for a good layout
	}{
		{"packed", Layout{BlockSize: 4096, Blocks: 10}, ""},
		{"strided", Layout{BlockSize: 4096, Blocks: 10, Stride: 8192}, ""},
		{"layers", Layout{BlockSize: 16, Blocks: 4, Layers: 3, LayerStride: 100}, ""},
		{"zero size", Layout{Blocks: 1}, "block size is 0"},
		{"no blocks", Layout{BlockSize: 1}, "0 blocks per layer"},
		{"negative layers", Layout{BlockSize: 1, Blocks: 1, Layers: -1}, "-1 layers"},
		{"overlapping blocks", Layout{BlockSize: 10, Blocks: 2, Stride: 9}, "blocks would overlap"},
		{"overlapping layers", Layout{BlockSize: 10, Blocks: 2, Layers: 2, LayerStride: 19}, "layers would overlap"},
		{"too many", Layout{BlockSize: 1, Blocks: 1 << 20, Layers: 1 << 13}, "more than"},
		{"past the address space", Layout{BlockSize: 1, Blocks: 3, Stride: math.MaxUint64/2 + 1}, "address space"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.l.Norm().Check()
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Check = %v, want ErrLayout saying %q", err, c.want)
			}
		})
	}
}

func TestFit(t *testing.T) {
	one := finder(region{id: 7, base: 0x1000, size: 0x1000})
	l := Layout{BlockSize: 256, Blocks: 4, Layers: 2, LayerStride: 3072}
	s, err := Fit(l, 0x1000, one)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Place{{7, 0}, {7, 3072}}; fmt.Sprint(s.Layers) != fmt.Sprint(want) {
		t.Fatalf("layers at %v, want %v", s.Layers, want)
	}
	// The last block of the last layer runs one byte past the region.
	if _, err := Fit(l, 0x1001, one); !errors.Is(err, errNotThere) || !strings.Contains(err.Error(), "layer 1 of 2") {
		t.Fatalf("Fit past the end = %v, want the finder's error naming layer 1", err)
	}
	if _, err := Fit(Layout{BlockSize: 4096, Blocks: 2}, 0x1000, one); !errors.Is(err, errNotThere) || !strings.Contains(err.Error(), "2 blocks of 4096 bytes") {
		t.Fatalf("Fit of a one-layer layout past the end = %v, want the finder's error naming the layout", err)
	}
	// Layers in two regions: each is found on its own.
	two := finder(region{id: 1, base: 0, size: 1024}, region{id: 2, base: 1024, size: 1024})
	s, err = Fit(Layout{BlockSize: 256, Blocks: 4, Layers: 2}, 0, two)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Place{{1, 0}, {2, 0}}; fmt.Sprint(s.Layers) != fmt.Sprint(want) {
		t.Fatalf("layers at %v, want %v", s.Layers, want)
	}
	if _, err := Fit(Layout{BlockSize: 8, Blocks: 2}, math.MaxUint64-8, one); !errors.Is(err, ErrLayout) {
		t.Fatalf("Fit wrapping the address space = %v, want ErrLayout", err)
	}
	if _, err := Fit(Layout{Blocks: 2}, 0, one); !errors.Is(err, ErrLayout) {
		t.Fatalf("Fit of a malformed layout = %v, want ErrLayout", err)
	}
}

func mustList(t *testing.T, local, remote Layout, lf, rf Finder) *List {
	t.Helper()
	ls, err := Fit(local, 0, lf)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := Fit(remote, 0, rf)
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(ls, rs)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// runs cuts src and returns each run as "first+n:loff->roff/len".
func runs(t *testing.T, l *List, src Source, merge bool) []string {
	t.Helper()
	n, err := l.Check(&src, merge)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for k := 0; k < src.Len(); {
		r := l.Next(&src, k, merge)
		out = append(out, fmt.Sprintf("%d+%d:%d->%d/%d", r.First, r.N, r.LocalOff, r.RemoteOff, r.Length))
		k += r.N
	}
	if len(out) != n {
		t.Fatalf("Check counted %d runs, Next cut %d: %v", n, len(out), out)
	}
	return out
}

func TestMerging(t *testing.T) {
	big := finder(region{id: 1, base: 0, size: 1 << 30})
	packed := Layout{BlockSize: 10, Blocks: 8}
	strided := Layout{BlockSize: 10, Blocks: 8, Stride: 20}
	layered := Layout{BlockSize: 10, Blocks: 4, Layers: 2} // packed layers: layer 1 follows layer 0
	gapped := Layout{BlockSize: 10, Blocks: 4, Layers: 2, LayerStride: 100}
	split := finder(region{id: 1, base: 0, size: 40}, region{id: 2, base: 40, size: 40}) // layers of `layered` in two regions
	ps := func(p ...uint32) Source {
		var out []Pair
		for k := 0; k < len(p); k += 2 {
			out = append(out, Pair{p[k], p[k+1]})
		}
		return Pairs(out)
	}
	for _, c := range []struct {
		name          string
		local, remote Layout
		lf, rf        Finder
		src           Source
		merge         bool
		want          string
	}{
		{"packed range merges to one", packed, packed, big, big, Range(0, 0, 8), true, "[0+8:0->0/80]"},
		{"no merge keeps each pair", packed, packed, big, big, Range(2, 5, 3), false, "[0+1:20->50/10 1+1:30->60/10 2+1:40->70/10]"},
		{"shifted range merges", packed, packed, big, big, Range(2, 5, 3), true, "[0+3:20->50/30]"},
		{"strided remote does not merge", packed, strided, big, big, Range(0, 0, 3), true, "[0+1:0->0/10 1+1:10->20/10 2+1:20->40/10]"},
		{"backwards does not merge", packed, packed, big, big, ps(3, 3, 2, 2), true, "[0+1:30->30/10 1+1:20->20/10]"},
		{"one side contiguous only", packed, packed, big, big, ps(0, 0, 1, 5, 2, 6), true, "[0+1:0->0/10 1+2:10->50/20]"},
		{"packed layers merge across", layered, layered, big, big, Range(2, 2, 4), true, "[0+4:20->20/40]"},
		{"gapped layers split", gapped, gapped, big, big, Range(2, 2, 4), true, "[0+2:20->20/20 2+2:100->100/20]"},
		{"layers in two regions split", layered, layered, split, big, Range(2, 2, 4), true, "[0+2:20->20/20 2+2:40->40/20]"},
		{"empty", packed, packed, big, big, Range(0, 0, 0), true, "[]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := mustList(t, c.local, c.remote, c.lf, c.rf)
			if got := fmt.Sprint(runs(t, l, c.src, c.merge)); got != c.want {
				t.Fatalf("runs %s, want %s", got, c.want)
			}
		})
	}
}

func TestRunPlaces(t *testing.T) {
	split := finder(region{id: 1, base: 0, size: 40}, region{id: 2, base: 40, size: 40})
	big := finder(region{id: 9, base: 0, size: 1 << 20})
	l := mustList(t, Layout{BlockSize: 10, Blocks: 4, Layers: 2}, Layout{BlockSize: 10, Blocks: 8, Stride: 30}, split, big)
	src := Pairs([]Pair{{6, 3}})
	r := l.Next(&src, 0, true)
	if r.Local != (Place{2, 20}) || r.Remote != (Place{9, 90}) || r.LocalOff != 60 || r.RemoteOff != 90 {
		t.Fatalf("run %+v: want local region 2 offset 20 (off 60), remote region 9 offset 90", r)
	}
}

func TestIndexOutOfRange(t *testing.T) {
	big := finder(region{id: 1, base: 0, size: 1 << 20})
	l := mustList(t, Layout{BlockSize: 8, Blocks: 4, Layers: 2}, Layout{BlockSize: 8, Blocks: 5}, big, big)
	for _, c := range []struct {
		name string
		src  Source
		want string
	}{
		{"local past the end", Pairs([]Pair{{0, 0}, {8, 0}}), "pair 1 is (local 8, remote 0)"},
		{"remote past the end", Pairs([]Pair{{7, 5}}), "pair 0 is (local 7, remote 5)"},
		{"range past local", Range(5, 0, 4), "range of 4 blocks from local 5"},
		{"range past remote", Range(0, 2, 4), "range of 4 blocks from local 0, remote 2"},
		{"range wrapping uint32", Range(math.MaxUint32, 0, 2), "range of 2 blocks"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, merge := range []bool{false, true} {
				if _, err := l.Check(&c.src, merge); !errors.Is(err, ErrIndex) || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("Check = %v, want ErrIndex saying %q", err, c.want)
				}
			}
		})
	}
	src := Range(4, 0, 4)
	if n, err := l.Check(&src, true); err != nil || n != 1 {
		t.Fatalf("Check of the last four blocks = %d, %v; want 1 run", n, err)
	}
}

func TestSizesDiffer(t *testing.T) {
	big := finder(region{id: 1, base: 0, size: 1 << 20})
	a, _ := Fit(Layout{BlockSize: 8, Blocks: 1}, 0, big)
	b, _ := Fit(Layout{BlockSize: 16, Blocks: 1}, 0, big)
	if _, err := New(a, b); !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), "8 bytes, remote blocks 16") {
		t.Fatalf("New = %v, want ErrLayout naming both sizes", err)
	}
}

func TestNoAllocationPerIndex(t *testing.T) {
	big := finder(region{id: 1, base: 0, size: 1 << 30})
	l := mustList(t, Layout{BlockSize: 64, Blocks: 1024, Layers: 4}, Layout{BlockSize: 64, Blocks: 4096, Stride: 128}, big, big)
	pairs := make([]Pair, 4096)
	for k := range pairs {
		pairs[k] = Pair{uint32(k), uint32(k)}
	}
	src := Pairs(pairs)
	allocs := testing.AllocsPerRun(10, func() {
		for _, merge := range []bool{false, true} {
			if _, err := l.Check(&src, merge); err != nil {
				t.Fatal(err)
			}
			for k := 0; k < src.Len(); {
				k += l.Next(&src, k, merge).N
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations cutting 4096 pairs, want 0", allocs)
	}
}

func BenchmarkNext(b *testing.B) {
	big := finder(region{id: 1, base: 0, size: 1 << 30})
	for _, c := range []struct {
		name   string
		remote Layout
	}{
		{"merged", Layout{BlockSize: 64, Blocks: 1 << 16}},
		{"unmerged", Layout{BlockSize: 64, Blocks: 1 << 16, Stride: 128}},
	} {
		b.Run(c.name, func(b *testing.B) {
			l := mustListB(b, Layout{BlockSize: 64, Blocks: 1 << 16}, c.remote, big)
			src := Range(0, 0, 1<<16)
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; done += src.Len() {
				l.Check(&src, true)
				for k := 0; k < src.Len(); {
					k += l.Next(&src, k, true).N
				}
			}
		})
	}
}

func mustListB(b *testing.B, local, remote Layout, f Finder) *List {
	ls, err := Fit(local, 0, f)
	if err != nil {
		b.Fatal(err)
	}
	rs, err := Fit(remote, 0, f)
	if err != nil {
		b.Fatal(err)
	}
	l, err := New(ls, rs)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

package blocks

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
)

// Errors, wrapped with what failed. The engine maps them onto its public
// sentinels.
var (
	// ErrLayout: the layout itself is malformed (a zero block size or
	// count, strides that overlap blocks, a span past the address space).
	ErrLayout = errors.New("malformed block layout")
	// ErrIndex: a submitted index is past its layout's last block.
	ErrIndex = errors.New("block index out of range")
)

// MaxBlocks is the most blocks a layout may have, over all its layers:
// indices are uint32.
const MaxBlocks = math.MaxUint32

// Layout describes where a side's blocks lie, relative to the address of
// block 0 of layer 0. Block i (0 <= i < Layers*Blocks) is block i%Blocks
// of layer i/Blocks, at (i/Blocks)*LayerStride + (i%Blocks)*Stride.
type Layout struct {
	// BlockSize is every block's length in bytes.
	BlockSize uint64
	// Blocks is how many blocks a layer has.
	Blocks int
	// Stride is the distance between two blocks of a layer; 0 means
	// BlockSize (packed blocks).
	Stride uint64
	// Layers is how many layers there are; 0 means 1.
	Layers int
	// LayerStride is the distance between two layers' block 0; 0 means
	// Blocks*Stride (packed layers).
	LayerStride uint64
}

// Norm returns l with its defaults filled in.
func (l Layout) Norm() Layout {
	if l.Stride == 0 {
		l.Stride = l.BlockSize
	}
	if l.Layers == 0 {
		l.Layers = 1
	}
	if l.LayerStride == 0 && l.Blocks > 0 {
		l.LayerStride = uint64(l.Blocks) * l.Stride
	}
	return l
}

// Check reports whether l (normalised) is well formed: blocks of some
// size, that do not overlap, and a span that fits in the address space.
func (l Layout) Check() error {
	switch {
	case l.BlockSize == 0:
		return fmt.Errorf("%w: block size is 0", ErrLayout)
	case l.Blocks <= 0:
		return fmt.Errorf("%w: %d blocks per layer; want at least 1", ErrLayout, l.Blocks)
	case l.Layers <= 0:
		return fmt.Errorf("%w: %d layers; want at least 1", ErrLayout, l.Layers)
	case uint64(l.Blocks)*uint64(l.Layers) > MaxBlocks || uint64(l.Blocks) > MaxBlocks || uint64(l.Layers) > MaxBlocks:
		return fmt.Errorf("%w: %d layers of %d blocks is more than %d blocks", ErrLayout, l.Layers, l.Blocks, uint64(MaxBlocks))
	case l.Stride < l.BlockSize:
		return fmt.Errorf("%w: stride %d is less than the block size %d: blocks would overlap", ErrLayout, l.Stride, l.BlockSize)
	}
	layer, ok := span(uint64(l.Blocks), l.Stride, l.BlockSize)
	if !ok {
		return fmt.Errorf("%w: a layer of %d blocks of %d bytes at stride %d spans more than the address space", ErrLayout, l.Blocks, l.BlockSize, l.Stride)
	}
	if l.Layers > 1 && l.LayerStride < layer {
		return fmt.Errorf("%w: layer stride %d is less than a layer's span %d: layers would overlap", ErrLayout, l.LayerStride, layer)
	}
	if _, ok := span(uint64(l.Layers), l.LayerStride, layer); !ok {
		return fmt.Errorf("%w: %d layers at stride %d span more than the address space", ErrLayout, l.Layers, l.LayerStride)
	}
	return nil
}

// span is (n-1)*stride + size, and whether it fits in 64 bits.
func span(n, stride, size uint64) (uint64, bool) {
	hi, lo := bits.Mul64(n-1, stride)
	s, carry := bits.Add64(lo, size, 0)
	return s, hi == 0 && carry == 0
}

// Count is how many blocks l has over all its layers (l normalised).
func (l Layout) Count() uint32 { return uint32(l.Blocks * l.Layers) }

// LayerSpan is the bytes from a layer's block 0 to the end of its last
// block (l normalised and checked).
func (l Layout) LayerSpan() uint64 { return uint64(l.Blocks-1)*l.Stride + l.BlockSize }

// Extent is the bytes from block 0 of layer 0 to the end of the last
// block of the last layer (l normalised and checked).
func (l Layout) Extent() uint64 { return uint64(l.Layers-1)*l.LayerStride + l.LayerSpan() }

// Place is where a range lies once translated: a region and an offset in
// it.
type Place struct {
	Region uint32
	Offset uint64
}

// Finder tells Fit where [addr, addr+n) lies: inside one region, or an
// error that says why not (not registered, out of bounds).
type Finder func(addr, n uint64) (Place, error)

// Side is a layout fitted at an address: where each of its layers lies.
type Side struct {
	Layout Layout // normalised
	Base   uint64 // the address of block 0 of layer 0
	// Layers is where each layer's block 0 lies.
	Layers []Place
}

// Fit normalises and checks l at base and asks find where each layer
// lies (once for the whole extent when one region holds it). The error
// names the layer that does not fit.
func Fit(l Layout, base uint64, find Finder) (Side, error) {
	l = l.Norm()
	if err := l.Check(); err != nil {
		return Side{}, err
	}
	if base+l.Extent() < base {
		return Side{}, fmt.Errorf("%w: %d bytes at %#x run past the end of the address space", ErrLayout, l.Extent(), base)
	}
	s := Side{Layout: l, Base: base, Layers: make([]Place, l.Layers)}
	if p, err := find(base, l.Extent()); err == nil {
		for k := range s.Layers {
			s.Layers[k] = Place{Region: p.Region, Offset: p.Offset + uint64(k)*l.LayerStride}
		}
		return s, nil
	} else if l.Layers == 1 {
		return Side{}, fmt.Errorf("blocks %#x+%d (%d blocks of %d bytes at stride %d): %w", base, l.Extent(), l.Blocks, l.BlockSize, l.Stride, err)
	}
	for k := range s.Layers {
		lo := base + uint64(k)*l.LayerStride
		p, err := find(lo, l.LayerSpan())
		if err != nil {
			return Side{}, fmt.Errorf("layer %d of %d, blocks %#x+%d: %w", k, l.Layers, lo, l.LayerSpan(), err)
		}
		s.Layers[k] = p
	}
	return s, nil
}

// at returns block i's offset from Base and where it lies.
func (s *Side) at(i uint32) (uint64, Place) {
	l := &s.Layout
	if l.Layers == 1 {
		off := uint64(i) * l.Stride
		return off, Place{Region: s.Layers[0].Region, Offset: s.Layers[0].Offset + off}
	}
	k, j := uint64(i)/uint64(l.Blocks), uint64(i)%uint64(l.Blocks)
	p := s.Layers[k]
	return k*l.LayerStride + j*l.Stride, Place{Region: p.Region, Offset: p.Offset + j*l.Stride}
}

// Pair is one block transfer: a local block index and a remote one.
type Pair struct{ Local, Remote uint32 }

// Source is a submission's pairs: a list, or a range (local+k, remote+k
// for k < n).
type Source struct {
	pairs  []Pair
	ranged bool
	lf, rf uint32
	n      int
}

// Pairs is the source of the pairs p.
func Pairs(p []Pair) Source { return Source{pairs: p, n: len(p)} }

// Range is the source of the n pairs (local+k, remote+k).
func Range(local, remote uint32, n int) Source {
	return Source{ranged: true, lf: local, rf: remote, n: max(n, 0)}
}

// Len is how many pairs s has.
func (s *Source) Len() int { return s.n }

// At returns pair k of s.
func (s *Source) At(k int) (local, remote uint32) {
	if s.ranged {
		return s.lf + uint32(k), s.rf + uint32(k)
	}
	p := s.pairs[k]
	return p.Local, p.Remote
}

// List is a prepared block list: a local side and a remote side whose
// blocks have one size.
type List struct {
	Local, Remote Side
}

// New returns the list of local and remote, which must have one block
// size.
func New(local, remote Side) (*List, error) {
	if local.Layout.BlockSize != remote.Layout.BlockSize {
		return nil, fmt.Errorf("%w: local blocks are %d bytes, remote blocks %d: a pair moves one block, so both sides need one size",
			ErrLayout, local.Layout.BlockSize, remote.Layout.BlockSize)
	}
	return &List{Local: local, Remote: remote}, nil
}

// Run is consecutive pairs of a submission that move as one range:
// pairs [First, First+N) of the source, Length bytes from Local's block
// to Remote's.
type Run struct {
	First, N int
	// LocalOff and RemoteOff are the first block's offsets from each
	// side's Base; Local and Remote, where they lie.
	LocalOff, RemoteOff uint64
	Local, Remote       Place
	Length              uint64
}

// Check checks every index of src against the layouts and counts the
// runs Next will cut (each pair its own run unless merge). The error
// names the first bad pair.
func (l *List) Check(src *Source, merge bool) (runs int, err error) {
	lc, rc := l.Local.Layout.Count(), l.Remote.Layout.Count()
	n := src.Len()
	if src.ranged {
		if n > 0 && (uint64(src.lf)+uint64(n) > uint64(lc) || uint64(src.rf)+uint64(n) > uint64(rc)) {
			return 0, fmt.Errorf("%w: range of %d blocks from local %d, remote %d: the local layout has %d blocks, the remote %d",
				ErrIndex, n, src.lf, src.rf, lc, rc)
		}
	} else {
		for k, p := range src.pairs {
			if p.Local >= lc || p.Remote >= rc {
				return 0, fmt.Errorf("%w: pair %d is (local %d, remote %d): the local layout has %d blocks, the remote %d",
					ErrIndex, k, p.Local, p.Remote, lc, rc)
			}
		}
	}
	if !merge {
		return n, nil
	}
	for k := 0; k < n; runs++ {
		k = l.end(src, k)
	}
	return runs, nil
}

// end returns the index after the last pair of the run that starts at
// pair k.
func (l *List) end(src *Source, k int) int {
	size := l.Local.Layout.BlockSize
	li, ri := src.At(k)
	_, lp := l.Local.at(li)
	_, rp := l.Remote.at(ri)
	for k++; k < src.Len(); k++ {
		li, ri = src.At(k)
		_, nl := l.Local.at(li)
		_, nr := l.Remote.at(ri)
		if nl.Region != lp.Region || nl.Offset != lp.Offset+size || nr.Region != rp.Region || nr.Offset != rp.Offset+size {
			break
		}
		lp, rp = nl, nr
	}
	return k
}

// Next returns the run that starts at pair k of src (checked with Check):
// pair k and, if merge, the pairs after it whose blocks follow on both
// sides, in the same regions.
func (l *List) Next(src *Source, k int, merge bool) Run {
	var r Run
	l.NextIn(&r, src, k, merge)
	return r
}

// NextIn is Next into r. The submit path uses it: a returned Run is
// stored aside and copied, and the copy reads what was just written in
// other widths, which the processor cannot forward and waits for.
func (l *List) NextIn(r *Run, src *Source, k int, merge bool) {
	li, ri := src.At(k)
	r.First, r.N = k, 1
	r.LocalOff, r.Local = l.Local.at(li)
	r.RemoteOff, r.Remote = l.Remote.at(ri)
	if merge {
		r.N = l.end(src, k) - k
	}
	r.Length = uint64(r.N) * l.Local.Layout.BlockSize
}

package slicer

import (
	"math"
	"testing"
)

func TestSliceSize(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name       string
		configured uint64
		caps       Caps
		want       uint64
	}{
		{"unset config is the default", 0, Caps{}, DefaultSlice},
		{"config kept when the transport says nothing (tcp)", 4 * mib, Caps{}, 4 * mib},
		{"raised to the preferred size (shm)", mib, Caps{PreferredSlice: 64 * mib}, 64 * mib},
		{"config above preferred is kept", 128 * mib, Caps{PreferredSlice: 64 * mib}, 128 * mib},
		{"clamped to the largest", 8 * mib, Caps{MaxSlice: 2 * mib}, 2 * mib},
		{"preferred above largest is clamped", mib, Caps{PreferredSlice: 64 * mib, MaxSlice: 16 * mib}, 16 * mib},
		{"default clamped", 0, Caps{MaxSlice: 4096}, 4096},
		{"largest above config changes nothing", mib, Caps{MaxSlice: 8 * mib}, mib},
		{"one-byte slices", 1, Caps{}, 1},
	} {
		if got := SliceSize(c.configured, c.caps); got != c.want {
			t.Errorf("%s: SliceSize(%d, %+v) = %d, want %d", c.name, c.configured, c.caps, got, c.want)
		}
	}
}

func TestCutCounts(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		length, configured uint64
		caps               Caps
		slice              uint64
		slices             int64
	}{
		{1, mib, Caps{}, mib, 1},
		{mib - 1, mib, Caps{}, mib, 1},
		{mib, mib, Caps{}, mib, 1},
		{mib + 1, mib, Caps{}, mib, 2},
		{64 * mib, mib, Caps{}, mib, 64},
		{64 * mib, mib, Caps{PreferredSlice: 64 * mib}, 64 * mib, 1},
		{64*mib + 1, mib, Caps{PreferredSlice: 64 * mib}, 64 * mib, 2},
		{10, 3, Caps{}, 3, 4},
		{10, 3, Caps{MaxSlice: 2}, 2, 5},
		{0, mib, Caps{}, mib, 0},
		// No overflow near the top of uint64.
		{math.MaxUint64 / 2, 1 << 62, Caps{}, 1 << 62, 2},
		// A slice near 2^64 (caps the loader refuses) still cuts one
		// slice, not 0: Length+Slice-1 would wrap.
		{4096, mib, Caps{PreferredSlice: math.MaxUint64}, math.MaxUint64, 1},
		{math.MaxUint64, mib, Caps{PreferredSlice: math.MaxUint64}, math.MaxUint64, 1},
	} {
		p := Cut(Input{Length: c.length, Configured: c.configured, Caps: c.caps})
		if p.Slice != c.slice || p.Slices != c.slices {
			t.Errorf("Cut(%d bytes, config %d, %+v) = %d slices of %d, want %d of %d", c.length, c.configured, c.caps, p.Slices, p.Slice, c.slices, c.slice)
		}
		if c.length > 0 && (uint64(p.Slices-1)*p.Slice >= c.length || uint64(p.Slices)*p.Slice < c.length) {
			t.Errorf("%d slices of %d do not cover %d bytes exactly once", p.Slices, p.Slice, c.length)
		}
	}
}

func TestRails(t *testing.T) {
	for _, c := range []struct {
		name                  string
		allowed, every, avoid uint64
		want                  uint64
	}{
		{"no policy, nothing avoided: all", 0, 0b1111, 0, 0},
		{"policy kept", 0b0011, 0b1111, 0, 0b0011},
		{"avoid out of all", 0, 0b1111, 0b0100, 0b1011},
		{"avoid out of the policy's", 0b0011, 0b1111, 0b0001, 0b0010},
		{"avoid outside the policy changes nothing", 0b0011, 0b1111, 0b1000, 0b0011},
		{"avoiding every allowed rail gives avoiding up", 0b0011, 0b1111, 0b0011, 0b0011},
		{"avoiding every rail gives avoiding up", 0, 0b11, 0b11, 0},
		{"single rail avoided: kept", 0, 0b1, 0b1, 0},
	} {
		if got := Rails(c.allowed, c.every, c.avoid); got != c.want {
			t.Errorf("%s: Rails(%b, %b, %b) = %b, want %b", c.name, c.allowed, c.every, c.avoid, got, c.want)
		}
	}
	p := Cut(Input{Length: 1, Allowed: 0b110, Every: 0b111, Avoid: 0b010})
	if p.Rails != 0b100 {
		t.Errorf("Cut's rails %b, want 100", p.Rails)
	}
}

func TestCutAllocatesNothing(t *testing.T) {
	in := Input{Length: 64 << 20, Configured: 1 << 20, Caps: Caps{PreferredSlice: 64 << 20}, Every: 3, Avoid: 1}
	if n := testing.AllocsPerRun(100, func() { _ = Cut(in) }); n != 0 {
		t.Errorf("Cut allocates %v times per call", n)
	}
}

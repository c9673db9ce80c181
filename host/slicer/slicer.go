package slicer

// Caps is what a transport declares about slice sizes. Zero means it did
// not say.
type Caps struct {
	// MaxSlice is the largest slice the transport takes.
	MaxSlice uint64
	// PreferredSlice is the slice size the transport works best with; a
	// configured size below it is raised to it. A same-machine transport
	// that copies in place and splits large copies over its own workers
	// prefers large slices: host slices would only add per-slice overhead
	// to one memcpy.
	PreferredSlice uint64
}

// DefaultSlice is the slice size when the configuration gives none.
const DefaultSlice = 1 << 20

// Input is what a plan is made from.
type Input struct {
	// Length is the request's length in bytes.
	Length uint64
	// Configured is transfer.slice_size; 0 means DefaultSlice.
	Configured uint64
	// Caps is the transport's.
	Caps Caps
	// Allowed is the rails the request's policy allows, a bit per rail;
	// 0 means every rail.
	Allowed uint64
	// Every has a bit for every rail the transport has.
	Every uint64
	// Avoid is the rails earlier attempts failed on.
	Avoid uint64
}

// Plan is how a request is cut.
type Plan struct {
	// Slice is the size of every slice but the last, which is the rest.
	Slice uint64
	// Slices is how many slices the request is cut into.
	Slices int64
	// Rails is the rails the slices may take, a bit per rail; 0 means
	// every rail.
	Rails uint64
}

// SliceSize is the slice size for a transport with caps when the
// configuration says configured: configured (or DefaultSlice), raised to
// the transport's preferred size, clamped to its largest.
func SliceSize(configured uint64, c Caps) uint64 {
	s := configured
	if s == 0 {
		s = DefaultSlice
	}
	s = max(s, c.PreferredSlice)
	if c.MaxSlice != 0 {
		s = min(s, c.MaxSlice)
	}
	return s
}

// Rails returns the rails a request may use: those its policy allows
// (0: all), less avoid, unless that leaves none, in which case avoiding
// them is given up (a rail that failed once is better than no rail).
func Rails(allowed, every, avoid uint64) uint64 {
	if avoid == 0 {
		return allowed
	}
	base := allowed
	if base == 0 {
		base = every
	}
	if m := base &^ avoid; m != 0 {
		return m
	}
	return allowed
}

// Cut returns the plan for in.
func Cut(in Input) Plan {
	s := SliceSize(in.Configured, in.Caps)
	// Length/s rounded up, without Length+s-1, which wraps for a slice
	// near 2^64 (the loader refuses such caps; this holds without it).
	n := in.Length / s
	if in.Length%s != 0 {
		n++
	}
	return Plan{
		Slice:  s,
		Slices: int64(n),
		Rails:  Rails(in.Allowed, in.Every, in.Avoid),
	}
}

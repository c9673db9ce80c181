package progress

import (
	"math/bits"
	"sync"
)

// Freed batches are kept for later ones by size class: a pool that mixed
// sizes would hand a batch of 100,000 tasks a freed one of 1,000 now and
// then, which it cannot use, and the new batch would pay for fresh memory
// (30 MB of page faults and zeroing with the engine's records, measured
// in BenchmarkBlockSubmit as ~5,700 minor faults in one of 20 calls).
// A class holds capacities up to its size, which is a quarter of an
// octave above the last one's: what a batch is given is at most a
// quarter more than it asked for.

// classes is how many size classes there are: four an octave up to
// MaxTasks, and one for everything up to 64.
const classes = 4*(tokenAttemptShift-6) + 1

// SizeClass returns the size class of a capacity of n tasks (1 <= n <=
// MaxTasks) and its size, the capacity to allocate so that a batch of
// the class can take any capacity of it.
func SizeClass(n int) (class, size int) {
	if n <= 64 {
		return 0, 64
	}
	k := bits.Len(uint(n-1)) - 1 // 2^k < n <= 2^(k+1)
	step := 1 << k / 4
	q := (n - 1<<k + step - 1) / step // 1..4
	return 4*(k-6) + q, 1<<k + q*step
}

// ClassPools keeps freed things by size class (SizeClass): Get of a
// capacity returns one kept for its class, or nil.
type ClassPools [classes]sync.Pool

// Get returns a value Put for n's class, or nil.
func (p *ClassPools) Get(n int) any {
	c, _ := SizeClass(n)
	return p[c].Get()
}

// Put keeps v, made for capacity n (its class's size or more), for its
// class.
func (p *ClassPools) Put(n int, v any) {
	c, _ := SizeClass(n)
	p[c].Put(v)
}

var batchPools ClassPools

package main

import (
	"fmt"
	"math"
	"unsafe"
)

// maxElems bounds the count of every array a call takes (requests, block
// pairs, buffers, statuses): far above any real call, low enough that
// the Go slice a call builds from the array cannot fail to allocate.
// Larger counts are FERRY_ERR_INVALID.
const maxElems = 1 << 24

// span checks n elements of size bytes each at p before any pointer
// arithmetic or unsafe.Slice: n fits an int, n*size does not overflow,
// and the range does not run past the end of the address space. Without
// it a caller's SIZE_MAX or (void *)-1 would make unsafe.Slice panic, and
// the caller would get FERRY_ERR_INTERNAL for its own bad argument. what
// names the argument in the error ("buffer 3", "local_idx").
func span(what string, p unsafe.Pointer, n, size uint64) error {
	switch {
	case n > math.MaxInt64 || size != 0 && n > math.MaxUint64/size:
		if size == 1 {
			return fmt.Errorf("%s: a length of %d bytes from %p overflows the address space; pass the length of memory you own", what, n, p)
		}
		return fmt.Errorf("%s: %d elements of %d bytes from %p overflow the address space; pass the count of elements you own", what, n, size, p)
	case uint64(uintptr(p))+n*size < uint64(uintptr(p)):
		return fmt.Errorf("%s: %d bytes from %p run past the end of the address space; pass a pointer and length of memory you own", what, n*size, p)
	}
	return nil
}

// elems checks an array's element count against maxElems, then its span.
func elems(what string, p unsafe.Pointer, n, size uint64) error {
	if n > maxElems {
		return fmt.Errorf("%s: %d elements, over the limit of %d per call; split the call", what, n, maxElems)
	}
	return span(what, p, n, size)
}

//go:build cgo

package cmem

// #include <stdlib.h>
// #include <string.h>
import "C"

import (
	"errors"
	"unsafe"
)

// Malloc returns n bytes from C's malloc, zeroed. The garbage collector
// never sees them: Free them.
func Malloc(n int) ([]byte, error) {
	p := C.malloc(C.size_t(n))
	if p == nil {
		return nil, errors.New("malloc failed")
	}
	C.memset(p, 0, C.size_t(n))
	return unsafe.Slice((*byte)(p), n), nil
}

// Free gives b, from Malloc, back to C.
func Free(b []byte) { C.free(unsafe.Pointer(unsafe.SliceData(b))) }

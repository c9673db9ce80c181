//go:build cgo

// Package libc calls the C library's memcpy, for memcpy's benchmark to
// compare against (cgo is not allowed in a _test.go file). Nothing on
// Ferry's data path imports it.
package libc

/*
#include <string.h>
static void ferry_libc_memcpy(void *d, const void *s, size_t n) { memcpy(d, s, n); }
*/
import "C"

import "unsafe"

// Available reports whether Memcpy calls libc (a cgo build).
const Available = true

// Memcpy copies len(src) bytes into dst with libc's memcpy; dst must be
// at least as long, and the two must not overlap.
func Memcpy(dst, src []byte) {
	if len(src) == 0 {
		return
	}
	_ = dst[len(src)-1]
	C.ferry_libc_memcpy(unsafe.Pointer(unsafe.SliceData(dst)), unsafe.Pointer(unsafe.SliceData(src)), C.size_t(len(src)))
}

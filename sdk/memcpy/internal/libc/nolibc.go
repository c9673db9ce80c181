//go:build !cgo

// Package libc calls the C library's memcpy in a cgo build; without cgo
// there is none, and the benchmark that compares with it skips.
package libc

// Available reports whether Memcpy calls libc (a cgo build).
const Available = false

// Memcpy is copy without cgo; the benchmark does not run it.
func Memcpy(dst, src []byte) { copy(dst, src) }

//go:build !amd64

package memcpy

// repFast is false off amd64: there is no REP MOVSB.
func repFast() bool { return false }

// repCopy is never called off amd64 (repFast is false); it copies.
func repCopy(dst, src []byte) { copy(dst, src) }

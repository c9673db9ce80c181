//go:build !cgo

package cmem

import "errors"

// Malloc needs cgo.
func Malloc(n int) ([]byte, error) { return nil, errors.New("cmem: built without cgo") }

// Free needs cgo.
func Free(b []byte) {}

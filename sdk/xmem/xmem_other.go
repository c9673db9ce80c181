//go:build !linux

package xmem

// Read is Linux only.
func Read(pid int, addr uint64, dst []byte) error { return ErrUnsupported }

// Write is Linux only.
func Write(pid int, addr uint64, src []byte) error { return ErrUnsupported }

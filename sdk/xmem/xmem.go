package xmem

import "errors"

// Errors a copy fails with, wrapped with the range that failed.
var (
	// ErrFault: part of the range is not mapped in the host process (the
	// application freed memory it had registered).
	ErrFault = errors.New("host memory not mapped")
	// ErrDenied: the kernel forbids this process to attach to the host
	// (the ptrace scope, kernel.yama.ptrace_scope, or a non-dumpable
	// host).
	ErrDenied = errors.New("cross-memory attach denied")
	// ErrGone: the host process no longer exists.
	ErrGone = errors.New("host process gone")
	// ErrUnsupported: this system has no cross-memory attach.
	ErrUnsupported = errors.New("cross-memory attach not supported on this system")
)

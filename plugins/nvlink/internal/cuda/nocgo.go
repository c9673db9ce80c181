//go:build !(linux && cgo)

package cuda

import "errors"

var errNoCgo = errors.New("built without cgo: the CUDA backend is not in this binary")

// Error is a driver call that failed.
type Error struct {
	Call string
	Code int
	Text string
}

func (e *Error) Error() string { return e.Call + ": " + e.Text }

// Driver is the loaded libcuda.
type Driver struct{ Version, Devices int }

// Load fails: this build has no cgo.
func Load() (*Driver, error) { return nil, errNoCgo }

// Context is a device's primary context.
type Context struct{}

// Retain fails: this build has no cgo.
func (d *Driver) Retain(int) (*Context, error) { return nil, errNoCgo }

// Release does nothing.
func (c *Context) Release() error { return nil }

// Do fails.
func (c *Context) Do(func() error) error { return errNoCgo }

// Ordinal is 0.
func (c *Context) Ordinal() int { return 0 }

// Stream is a CUDA stream.
type Stream struct{}

// NewStream fails.
func NewStream() (*Stream, error) { return nil, errNoCgo }

// Destroy does nothing.
func (s *Stream) Destroy() error { return nil }

// Copy fails.
func (s *Stream) Copy(uint64, uint64, uint64) error { return errNoCgo }

// IPCHandleLen is the length of a legacy IPC handle.
const IPCHandleLen = 64

// OpenIPC fails.
func OpenIPC([]byte) (uint64, error) { return 0, errNoCgo }

// CloseIPC fails.
func CloseIPC(uint64) error { return errNoCgo }

// ImportFD fails.
func ImportFD(int, uint64, int) (uint64, error) { return 0, errNoCgo }

// UnmapFD fails.
func UnmapFD(uint64, uint64) error { return errNoCgo }

// HostRegister fails.
func HostRegister([]byte, bool) error { return errNoCgo }

// HostPointer is 0.
func HostPointer([]byte) uint64 { return 0 }

// HostUnregister fails.
func HostUnregister([]byte) error { return errNoCgo }

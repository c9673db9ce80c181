package path

import (
	"errors"
	"fmt"

	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/sdk/ring"
)

// The error taxonomy of the public API. Every error the engine returns
// wraps one of these (errors.Is) and names the segment, plugin or address
// involved.
var (
	ErrNotRegistered        = errors.New("memory not registered")
	ErrOutOfBounds          = errors.New("range out of bounds")
	ErrPermission           = errors.New("permission denied")
	ErrSegmentNotFound      = errors.New("segment not found")
	ErrTransportUnavailable = errors.New("transport unavailable")
	ErrPluginFailed         = errors.New("plugin failed")
	ErrDeadlineExceeded     = errors.New("deadline exceeded")
	ErrCanceled             = errors.New("canceled")
	ErrInvalid              = errors.New("invalid request")
	ErrClosed               = errors.New("engine closed")
)

// State is a task's state; see the constants.
type State = progress.State

// TransferError describes why one task did not complete.
type TransferError struct {
	Task      int    // index in its batch
	Op        Op     //
	Segment   string // remote segment name
	Remote    uint64 // remote address of the request
	Length    uint64
	Transport string // plugin that carried it, "" if none was chosen
	State     State
	Err       error // one of the Err* sentinels, wrapping the detail
}

func (e *TransferError) Error() string {
	s := fmt.Sprintf("task %d: %s %d bytes at %#x of segment %q", e.Task, e.Op, e.Length, e.Remote, e.Segment)
	if e.Transport != "" {
		s += " via " + e.Transport
	}
	return s + ": " + e.State.String() + ": " + e.Err.Error()
}

func (e *TransferError) Unwrap() error { return e.Err }

// statusErr maps a plugin's slice status to the taxonomy.
func statusErr(st ring.Status) error {
	var base error
	switch st {
	case ring.StatusNotRegistered:
		base = ErrNotRegistered
	case ring.StatusOutOfBounds:
		base = ErrOutOfBounds
	case ring.StatusPermission:
		base = ErrPermission
	case ring.StatusStaleIncarnation:
		return fmt.Errorf("%w: the peer restarted since its descriptor was read; reopen the segment", ErrSegmentNotFound)
	case ring.StatusPeerUnknown, ring.StatusPeerUnreachable:
		base = ErrTransportUnavailable
	case ring.StatusTimeout:
		base = ErrDeadlineExceeded
	case ring.StatusCanceled:
		base = ErrCanceled
	case ring.StatusInvalid, ring.StatusUnsupported:
		base = ErrInvalid
	default:
		base = ErrPluginFailed
	}
	return fmt.Errorf("%w: plugin reported %s", base, st)
}

// kindError is err, answering errors.Is for kind as well.
type kindError struct{ kind, err error }

func (k *kindError) Error() string   { return k.err.Error() }
func (k *kindError) Unwrap() []error { return []error{k.kind, k.err} }

// AsKind is err, answering errors.Is for kind as well (nil for nil).
func AsKind(kind, err error) error {
	if err == nil || errors.Is(err, kind) {
		return err
	}
	return &kindError{kind: kind, err: err}
}

func asKind(kind, err error) error { return AsKind(kind, err) }

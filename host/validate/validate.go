package validate

import (
	"errors"

	"github.com/ferrydev/ferry/host/segment"
	"github.com/ferrydev/ferry/internal/enum"
)

// Op is what a request does, numbered as the engine's Op.
type Op uint8

const (
	Read  Op = 1
	Write Op = 2
)

// Fault is why a request cannot be carried; OK when it can.
type Fault uint8

const (
	OK Fault = iota
	// UnknownOp: the op is neither Read nor Write.
	UnknownOp
	// ZeroLength: the local range is empty.
	ZeroLength
	// NotOpen: the segment handle is not open.
	NotOpen
	// Retired: the segment handle was retired (Input.Retired says why).
	Retired
	// NotRegistered: the local range is not inside one registered buffer.
	NotRegistered
	// NoBuffer: no buffer of the segment holds the remote address.
	NoBuffer
	// OutOfBounds: the remote range runs past the end of its buffer.
	OutOfBounds
	// Permission: the remote buffer does not allow the op.
	Permission
)

var faultNames = [...]string{"ok", "unknown op", "zero length", "segment not open", "segment retired", "local range not registered", "no remote buffer", "remote range out of bounds", "permission denied"}

func (f Fault) String() string { return enum.String(f, faultNames[:], "fault") }

// Input is what a request is checked against.
type Input struct {
	Op     Op
	Length uint64
	// Open says the segment handle names an open segment.
	Open bool
	// Retired is why the segment was retired, "" if it was not.
	Retired string
	// LocalFound says the local registry found the local range inside
	// one registered buffer, at (LocalRegion, LocalOffset).
	LocalFound  bool
	LocalRegion uint32
	LocalOffset uint64
	// Buffers is the segment descriptor's; Remote the request's address
	// in it.
	Buffers []segment.Buffer
	Remote  uint64
}

// Result is a verdict: Fault, and for a request that can be carried,
// both ranges as (region, offset).
type Result struct {
	Fault        Fault
	LocalRegion  uint32
	LocalOffset  uint64
	RemoteRegion uint32
	RemoteOffset uint64
	// Buffer is the index in Buffers of the buffer that refused the op
	// (Permission), else -1.
	Buffer int
}

// Basic checks what a request must be before anything else is looked
// at: a known op, a length, an open segment. Explaining a request needs
// only these.
func Basic(op Op, length uint64, open bool) Fault {
	switch {
	case op != Read && op != Write:
		return UnknownOp
	case length == 0:
		return ZeroLength
	case !open:
		return NotOpen
	}
	return OK
}

// Check returns the verdict on in. The checks run in a fixed order, so
// that a request with several faults always gets the same one: op,
// length, segment, retirement, local range, remote range.
func Check(in *Input) Result {
	r := Result{Buffer: -1, Fault: Basic(in.Op, in.Length, in.Open)}
	switch {
	case r.Fault != OK:
	case in.Retired != "":
		r.Fault = Retired
	case !in.LocalFound:
		r.Fault = NotRegistered
	}
	if r.Fault != OK {
		return r
	}
	r.LocalRegion, r.LocalOffset = in.LocalRegion, in.LocalOffset
	var err error
	r.RemoteRegion, r.RemoteOffset, err = segment.Translate(in.Buffers, in.Remote, in.Length, in.Op == Write)
	switch {
	case err == nil:
	case errors.Is(err, segment.ErrNoBuffer):
		r.Fault = NoBuffer
	case errors.Is(err, segment.ErrOutOfBounds):
		r.Fault = OutOfBounds
	case errors.Is(err, segment.ErrPermission):
		r.Fault, r.Buffer = Permission, segment.Find(in.Buffers, in.Remote)
	default:
		r.Fault = OutOfBounds // Translate has no other error; refuse rather than pass
	}
	return r
}

package ring

import (
	"encoding/binary"
	"fmt"

	"github.com/ferrydev/ferry/internal/enum"
)

// SlotSize is the size in bytes of one descriptor slot. It is part of the
// layout version: changing it changes LayoutVersion.
const SlotSize = 64

// Op is what a descriptor asks the transport to do.
type Op uint8

const (
	// OpWrite copies Length bytes from the local region into the peer's region.
	OpWrite Op = 1
	// OpRead copies Length bytes from the peer's region into the local region.
	OpRead Op = 2
	// OpCompletion marks a descriptor on a completion ring.
	OpCompletion Op = 3
	// OpNop completes at once; used for liveness and latency probes.
	OpNop Op = 4
)

var opNames = [...]string{OpWrite: "write", OpRead: "read", OpCompletion: "completion", OpNop: "nop"}

func (o Op) String() string { return enum.String(o, opNames[:], "op") }

// Status is the outcome a plugin reports for one descriptor. The numeric
// values travel on rings and on transport wire protocols; never renumber.
type Status int32

const (
	StatusOK               Status = 0
	StatusInvalid          Status = 1  // malformed descriptor or request
	StatusNotRegistered    Status = 2  // region id not registered (local or remote)
	StatusOutOfBounds      Status = 3  // offset+length outside the region
	StatusPermission       Status = 4  // region does not allow this op
	StatusStaleIncarnation Status = 5  // addressed to a previous life of the peer
	StatusPeerUnknown      Status = 6  // peer id not opened on this plugin
	StatusPeerUnreachable  Status = 7  // could not connect or connection lost
	StatusIO               Status = 8  // local I/O error
	StatusTimeout          Status = 9  // deadline passed inside the plugin
	StatusCanceled         Status = 10 // canceled before it ran
	StatusUnsupported      Status = 11 // op not supported by this transport
	StatusProtocol         Status = 12 // peer spoke a protocol we do not understand
	StatusShutdown         Status = 13 // plugin is stopping
	statusLimit            Status = 14
)

var statusText = [...]string{
	StatusOK:               "ok",
	StatusInvalid:          "invalid request",
	StatusNotRegistered:    "region not registered",
	StatusOutOfBounds:      "out of bounds",
	StatusPermission:       "permission denied",
	StatusStaleIncarnation: "stale incarnation",
	StatusPeerUnknown:      "peer not opened",
	StatusPeerUnreachable:  "peer unreachable",
	StatusIO:               "i/o error",
	StatusTimeout:          "deadline exceeded",
	StatusCanceled:         "canceled",
	StatusUnsupported:      "unsupported operation",
	StatusProtocol:         "protocol error",
	StatusShutdown:         "plugin shutting down",
}

func (s Status) String() string {
	if s >= 0 && s < statusLimit {
		return statusText[s]
	}
	return fmt.Sprintf("status(%d)", int32(s))
}

// Valid reports whether s is a status this version knows.
func (s Status) Valid() bool { return s >= 0 && s < statusLimit }

// Descriptor is one entry of a submission or completion ring. It carries
// addresses as (region id, offset) pairs only: never a pointer, so that a
// peer process can check every access against what was registered.
//
// Layout (little-endian, 64 bytes):
//
//	0  Token        u64  host-chosen; echoed in the completion
//	8  Op           u8
//	9  Prio         u8
//	10 Rail         u16
//	12 Status       i32  completion only
//	16 LocalRegion  u32
//	20 Peer         u32
//	24 LocalOffset  u64
//	32 RemoteRegion u32
//	36 Flags        u32  on a completion: the lane's generation (the host client's AttachLane)
//	40 RemoteOffset u64
//	48 Length       u64  on a completion: bytes transferred
//	56 Deadline     i64  unix nanoseconds, 0 = none
//
// Prio is the request's sdk.Priority as a number (0 normal, 1 high, 2
// low: not TENT's order, where 0 is the most urgent). What a transport
// may assume of it: it is informational. The engine's admission stage
// has already decided what enters the ring and when (with a qos block,
// high-priority slices are not queued behind held-back low ones, and may
// have a lane to themselves), so a transport must not drop, delay or
// reorder a descriptor because of its Prio; it may use it to choose
// among its own queues, connections or link-level classes, serving
// higher priorities first, as long as every descriptor completes. Slices
// of one request carry the same Prio; descriptors of one lane arrive in
// the order the engine put them.
type Descriptor struct {
	Token        uint64
	Op           Op
	Prio         uint8
	Rail         uint16
	Status       Status
	LocalRegion  uint32
	Peer         uint32
	LocalOffset  uint64
	RemoteRegion uint32
	Flags        uint32
	RemoteOffset uint64
	Length       uint64
	Deadline     int64
}

// Encode writes d into b, which must hold SlotSize bytes.
func (d *Descriptor) Encode(b []byte) {
	_ = b[SlotSize-1]
	binary.LittleEndian.PutUint64(b[0:], d.Token)
	b[8] = byte(d.Op)
	b[9] = d.Prio
	binary.LittleEndian.PutUint16(b[10:], d.Rail)
	binary.LittleEndian.PutUint32(b[12:], uint32(d.Status))
	binary.LittleEndian.PutUint32(b[16:], d.LocalRegion)
	binary.LittleEndian.PutUint32(b[20:], d.Peer)
	binary.LittleEndian.PutUint64(b[24:], d.LocalOffset)
	binary.LittleEndian.PutUint32(b[32:], d.RemoteRegion)
	binary.LittleEndian.PutUint32(b[36:], d.Flags)
	binary.LittleEndian.PutUint64(b[40:], d.RemoteOffset)
	binary.LittleEndian.PutUint64(b[48:], d.Length)
	binary.LittleEndian.PutUint64(b[56:], uint64(d.Deadline))
}

// Decode reads a descriptor from b without validating it. Memory shared
// with another process can change under the reader: Decode copies every
// field once, so the caller validates the copy, never the slot.
func (d *Descriptor) Decode(b []byte) {
	_ = b[SlotSize-1]
	d.Token = binary.LittleEndian.Uint64(b[0:])
	d.Op = Op(b[8])
	d.Prio = b[9]
	d.Rail = binary.LittleEndian.Uint16(b[10:])
	d.Status = Status(binary.LittleEndian.Uint32(b[12:]))
	d.LocalRegion = binary.LittleEndian.Uint32(b[16:])
	d.Peer = binary.LittleEndian.Uint32(b[20:])
	d.LocalOffset = binary.LittleEndian.Uint64(b[24:])
	d.RemoteRegion = binary.LittleEndian.Uint32(b[32:])
	d.Flags = binary.LittleEndian.Uint32(b[36:])
	d.RemoteOffset = binary.LittleEndian.Uint64(b[40:])
	d.Length = binary.LittleEndian.Uint64(b[48:])
	d.Deadline = int64(binary.LittleEndian.Uint64(b[56:]))
}

// Validate checks the fields of a submission descriptor that can be checked
// without knowing the registered regions: a known op, a non-zero length, and
// ranges that do not overflow. Region bounds are the plugin's to check.
func (d *Descriptor) Validate() error {
	switch d.Op {
	case OpWrite, OpRead:
		if d.Length == 0 {
			return fmt.Errorf("descriptor %#x: zero length", d.Token)
		}
		if d.LocalOffset+d.Length < d.LocalOffset {
			return fmt.Errorf("descriptor %#x: local range %d+%d overflows", d.Token, d.LocalOffset, d.Length)
		}
		if d.RemoteOffset+d.Length < d.RemoteOffset {
			return fmt.Errorf("descriptor %#x: remote range %d+%d overflows", d.Token, d.RemoteOffset, d.Length)
		}
	case OpNop:
	default:
		return fmt.Errorf("descriptor %#x: unknown op %d", d.Token, uint8(d.Op))
	}
	if !d.Status.Valid() {
		return fmt.Errorf("descriptor %#x: unknown status %d", d.Token, int32(d.Status))
	}
	return nil
}

package samehost

import (
	"errors"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Message types, the same numbers in every plugin's format.
const (
	MsgHello     = 1 // dialer -> server: segment name and incarnation wanted
	MsgHelloAck  = 2 // server -> dialer: StatusOK or why not
	MsgQuery     = 3 // dialer -> server: give me region R
	MsgRegion    = 4 // server -> dialer: R's length, perm, generation and how to reach it
	MsgRevoke    = 5 // server -> dialer: R (generation G) was unregistered
	MsgRevokeAck = 6 // dialer -> server: R (G) is dropped here
	MsgAuth      = 7 // dialer -> server: the dialer's proof of the cluster secret
	// MsgServed (dialer -> server): what the dialer moved in the server's
	// memory since its last report, and its own engine name. Sent only to
	// a server whose endpoint says Served (an older one drops a
	// connection that carries a type it does not know).
	MsgServed    = 8
	MsgTypeLimit = 9
)

// Sizes of a proof's parts (auth.go).
const (
	NonceLen = 16
	MACLen   = 32
)

// MaxNameLen is the longest segment name a hello carries.
const MaxNameLen = 255

var (
	// ErrMalformed marks a message that does not decode; a Codec's
	// errors wrap it, and the connection that carried it is dropped.
	ErrMalformed = errors.New("malformed message")
	// ErrVersion marks a peer that speaks another protocol version.
	ErrVersion = errors.New("protocol version mismatch")
)

// Msg is one decoded message. Which fields a type uses is the protocol's
// (above); where they sit in the bytes is the plugin's Codec.
type Msg struct {
	Type   uint8
	Perm   sdk.Perm    // MsgRegion: the region's permission
	Status ring.Status // MsgHelloAck, MsgRegion
	Region uint32
	Gen    uint64 // MsgRegion, MsgRevoke, MsgRevokeAck: registration generation
	Inc    uint64 // MsgHello: the incarnation wanted; MsgHelloAck: the server's
	Length uint64 // MsgRegion: the region's length
	Name   string // MsgHello: the segment addressed

	// Auth: the message carries a proof (hello: Nonce; ack: Nonce and
	// MAC; auth: MAC).
	Auth  bool
	Nonce [NonceLen]byte
	MAC   [MACLen]byte

	// What a MsgRegion with StatusOK says about how to reach the region,
	// besides an fd that may come as SCM_RIGHTS: Off, the region's offset
	// in that fd (a format that carries one); Device and Handle, device
	// memory reached through its handle instead of an fd (a format that
	// carries one).
	Off    uint64
	Device bool
	Handle sdk.Handle

	// Tally is a MsgServed's report (Name: the dialer's engine name).
	Tally Tally
}

// Tally is traffic a dialer moved in a server's memory: writes into it
// and reads from it, requests and bytes. One-sided transports copy
// without the server seeing it; the dialer reports it (MsgServed) so
// that the server can count what it served (kit.Served). The server
// takes it as the dialer says: a figure for operators, never a check.
type Tally struct {
	Writes, WriteBytes, Reads, ReadBytes uint64
}

// Zero says nothing was moved.
func (t Tally) Zero() bool { return t == Tally{} }

// Codec is a plugin's wire format: one message per SOCK_SEQPACKET
// datagram. Decode must trust nothing (every error wraps ErrMalformed or
// ErrVersion) and is fuzzed by the plugin.
type Codec interface {
	// Append appends m's wire form to b.
	Append(b []byte, m *Msg) []byte
	// Decode parses one whole message.
	Decode(b []byte) (Msg, error)
	// MaxLen is the longest message the format has.
	MaxLen() int
}

package shm

import (
	"encoding/binary"
	"fmt"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/kit/samehost"
	"github.com/ferrydev/ferry/sdk/ring"
)

// The region-exchange protocol (sdk/kit/samehost) runs on a SOCK_SEQPACKET unix socket, so
// every message arrives whole or not at all. A message is a fixed 48-byte
// header, little-endian, followed (hello only) by a name and (with the
// auth flag) the proof of a cluster secret:
//
//	0  magic   u32  "FSHM"
//	4  version u8
//	5  type    u8   msgHello .. msgAuth
//	6  perm    u8   msgRegion: the region's sdk.Perm; msgHello, msgHelloAck, msgAuth: flags (flagAuth)
//	7  nameLen u8   msgHello: length of the segment name after the header
//	8  status  i32  msgHelloAck, msgRegion: a ring.Status
//	12 region  u32
//	16 gen     u64  msgRegion, msgRevoke, msgRevokeAck: registration generation
//	24 inc     u64  msgHello: the incarnation the dialer addresses; msgHelloAck: the server's
//	32 off     u64  msgRegion: offset of the region in the memfd (always 0)
//	40 length  u64  msgRegion: the region's length, the memfd's size
//
// A msgServed (dialer -> server, only to a server whose endpoint says
// "served") carries the dialer's engine name after the header and, in
// place of gen, inc, off and length, what it moved in the server's
// memory since its last report: writes, write bytes, reads, read bytes.
//
// With flagAuth, a msgHello carries the dialer's 16-byte nonce after the
// name, a msgHelloAck the server's nonce and its 32-byte proof, and a
// msgAuth (sent by the dialer right after the ack) the dialer's proof
// (samehost/auth.go). A msgRegion with StatusOK carries the memfd as SCM_RIGHTS;
// nothing else carries fds.
const (
	wireMagic   = 0x4d485346 // "FSHM"
	wireVersion = 1
	headerLen   = 48
	maxMsgLen   = headerLen + MaxNameLen + samehost.NonceLen + samehost.MACLen
	// MaxNameLen is the longest segment name the protocol carries.
	MaxNameLen = samehost.MaxNameLen
)

// Message types and flags, as samehost numbers them.
const (
	msgHello     = samehost.MsgHello
	msgHelloAck  = samehost.MsgHelloAck
	msgQuery     = samehost.MsgQuery
	msgRegion    = samehost.MsgRegion
	msgRevoke    = samehost.MsgRevoke
	msgRevokeAck = samehost.MsgRevokeAck
	msgAuth      = samehost.MsgAuth
	msgServed    = samehost.MsgServed
	// flagAuth marks a hello, hello ack or auth message that carries a
	// proof of the cluster secret.
	flagAuth = 1
	nonceLen = samehost.NonceLen
	macLen   = samehost.MACLen
)

// authLen is how many bytes of proof follow the name in a message of
// type typ with the auth flag.
func authLen(typ uint8) int {
	switch typ {
	case msgHello:
		return nonceLen
	case msgHelloAck:
		return nonceLen + macLen
	case msgAuth:
		return macLen
	}
	return 0
}

var errMalformed = fmt.Errorf("shm: %w", samehost.ErrMalformed)

// msg is one message; codec is its wire form.
type msg = samehost.Msg

// codec is shm's samehost.Codec. A message never carries a device handle.
type codec struct{}

func (codec) MaxLen() int                           { return maxMsgLen }
func (codec) Append(b []byte, m *msg) []byte        { return encode(b, m) }
func (codec) Decode(b []byte) (samehost.Msg, error) { return decode(b) }

// encode appends m's wire form to b.
func encode(b []byte, m *msg) []byte {
	var h [headerLen]byte
	binary.LittleEndian.PutUint32(h[0:], wireMagic)
	h[4] = wireVersion
	h[5] = m.Type
	h[6] = uint8(m.Perm)
	if authLen(m.Type) > 0 {
		h[6] = 0
		if m.Auth {
			h[6] = flagAuth
		}
	}
	h[7] = uint8(len(m.Name))
	binary.LittleEndian.PutUint32(h[8:], uint32(m.Status))
	binary.LittleEndian.PutUint32(h[12:], m.Region)
	gen, inc, off, length := m.Gen, m.Inc, m.Off, m.Length
	if m.Type == msgServed {
		gen, inc, off, length = m.Tally.Writes, m.Tally.WriteBytes, m.Tally.Reads, m.Tally.ReadBytes
	}
	binary.LittleEndian.PutUint64(h[16:], gen)
	binary.LittleEndian.PutUint64(h[24:], inc)
	binary.LittleEndian.PutUint64(h[32:], off)
	binary.LittleEndian.PutUint64(h[40:], length)
	b = append(b, h[:]...)
	b = append(b, m.Name...)
	if m.Auth {
		switch m.Type {
		case msgHello:
			b = append(b, m.Nonce[:]...)
		case msgHelloAck:
			b = append(append(b, m.Nonce[:]...), m.MAC[:]...)
		case msgAuth:
			b = append(b, m.MAC[:]...)
		}
	}
	return b
}

// decode parses one whole message. It never trusts the sender: every field
// a peer could get wrong is checked here or by the caller before use.
func decode(b []byte) (msg, error) {
	var m msg
	if len(b) < headerLen {
		return m, fmt.Errorf("%w: %d bytes, header is %d", errMalformed, len(b), headerLen)
	}
	if mg := binary.LittleEndian.Uint32(b[0:]); mg != wireMagic {
		return m, fmt.Errorf("%w: bad magic %#x", errMalformed, mg)
	}
	if v := b[4]; v != wireVersion {
		return m, fmt.Errorf("%w: version %d, this side speaks %d", errVersion, v, wireVersion)
	}
	m.Type = b[5]
	if m.Type == 0 || m.Type >= samehost.MsgTypeLimit {
		return m, fmt.Errorf("%w: unknown type %d", errMalformed, m.Type)
	}
	nameLen, proof := int(b[7]), 0
	if authLen(m.Type) > 0 {
		if b[6]&^flagAuth != 0 {
			return m, fmt.Errorf("%w: type %d with flags %#x", errMalformed, m.Type, b[6])
		}
		m.Auth = b[6] == flagAuth
		if m.Auth {
			proof = authLen(m.Type)
		} else if m.Type == msgAuth {
			return m, fmt.Errorf("%w: an auth message without its proof", errMalformed)
		}
	} else {
		m.Perm = sdk.Perm(b[6])
	}
	if len(b) != headerLen+nameLen+proof {
		return m, fmt.Errorf("%w: %d bytes, header announces %d", errMalformed, len(b), headerLen+nameLen+proof)
	}
	if nameLen > 0 && m.Type != msgHello && m.Type != msgServed {
		return m, fmt.Errorf("%w: type %d carries a name", errMalformed, m.Type)
	}
	m.Status = ring.Status(int32(binary.LittleEndian.Uint32(b[8:])))
	if !m.Status.Valid() {
		return m, fmt.Errorf("%w: unknown status %d", errMalformed, m.Status)
	}
	m.Region = binary.LittleEndian.Uint32(b[12:])
	m.Gen = binary.LittleEndian.Uint64(b[16:])
	m.Inc = binary.LittleEndian.Uint64(b[24:])
	m.Off = binary.LittleEndian.Uint64(b[32:])
	m.Length = binary.LittleEndian.Uint64(b[40:])
	m.Name = string(b[headerLen : headerLen+nameLen])
	if m.Type == msgServed {
		m.Tally = samehost.Tally{Writes: m.Gen, WriteBytes: m.Inc, Reads: m.Off, ReadBytes: m.Length}
		m.Gen, m.Inc, m.Off, m.Length = 0, 0, 0, 0
	}
	rest := b[headerLen+nameLen:]
	if m.Auth && m.Type != msgAuth {
		copy(m.Nonce[:], rest)
		rest = rest[nonceLen:]
	}
	if m.Auth && m.Type != msgHello {
		copy(m.MAC[:], rest)
	}
	if m.Type == msgRegion && m.Status == ring.StatusOK {
		switch m.Perm {
		case sdk.PermRemoteRead, sdk.PermRemoteReadWrite:
		default:
			return m, fmt.Errorf("%w: region %d offered with permission %d", errMalformed, m.Region, m.Perm)
		}
		if m.Length == 0 || m.Length > 1<<46 || m.Off > 1<<46 {
			return m, fmt.Errorf("%w: region %d range offset %d length %d", errMalformed, m.Region, m.Off, m.Length)
		}
	}
	return m, nil
}

// errVersion marks a peer that speaks another protocol version.
var errVersion = fmt.Errorf("shm: %w", samehost.ErrVersion)

// EndpointVersion is the version of the endpoint blob this plugin writes.
const EndpointVersion = samehost.EndpointVersion

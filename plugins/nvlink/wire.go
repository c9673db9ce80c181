package nvlink

import (
	"encoding/binary"
	"fmt"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/kit/samehost"
	"github.com/ferrydev/ferry/sdk/ring"
)

// The region exchange (sdk/kit/samehost) runs on a SOCK_SEQPACKET unix socket: every message
// arrives whole. A message is a 48-byte little-endian header and a tail:
//
//	0  magic   u32  "FNVL"
//	4  version u8
//	5  type    u8   msgHello .. msgAuth
//	6  flags   u8   flagAuth (hello, ack, auth), flagDevice (region)
//	7  perm    u8   msgRegion: the region's sdk.Perm
//	8  status  i32  msgHelloAck, msgRegion: a ring.Status
//	12 region  u32
//	16 gen     u64  msgRegion, msgRevoke, msgRevokeAck: registration generation
//	24 inc     u64  msgHello: the incarnation wanted; msgHelloAck: the server's
//	32 length  u64  msgRegion: the region's length
//	40 tail    u16  bytes after the header
//	42 (zero)  6 bytes
//
// Tails: a hello carries the segment name, then (flagAuth) the dialer's
// nonce; an ack (flagAuth) the server's nonce and proof; an auth the
// dialer's proof (samehost/auth.go). A msgRegion with StatusOK and
// flagDevice carries the region's handle:
//
//	typeLen u8, type, device i32, size u64, offset u64, dataLen u16, data
//
// whose range [offset, offset+length) is exactly the region. A msgRegion
// with StatusOK without flagDevice is host memory: its memfd (exactly the
// region) comes as SCM_RIGHTS. Nothing else carries fds.
const (
	wireMagic   = 0x4c564e46 // "FNVL"
	wireVersion = 1
	headerLen   = 48
	maxMsgLen   = 2048
	// MaxNameLen is the longest segment name the protocol carries.
	MaxNameLen = samehost.MaxNameLen
	// maxHandleData bounds a handle's data on the wire.
	maxHandleData = 1024
)

const (
	msgHello     = samehost.MsgHello
	msgHelloAck  = samehost.MsgHelloAck
	msgQuery     = samehost.MsgQuery
	msgRegion    = samehost.MsgRegion
	msgRevoke    = samehost.MsgRevoke
	msgRevokeAck = samehost.MsgRevokeAck
	msgAuth      = samehost.MsgAuth
	flagAuth     = 1
	flagDevice   = 2
	nonceLen     = samehost.NonceLen
	macLen       = samehost.MACLen
)

var (
	errMalformed = fmt.Errorf("nvlink: %w", samehost.ErrMalformed)
	errVersion   = fmt.Errorf("nvlink: %w", samehost.ErrVersion)
)

// msg is one message; codec is its wire form (Off is not on it).
type msg = samehost.Msg

// codec is nvlink's samehost.Codec.
type codec struct{}

func (codec) MaxLen() int                           { return maxMsgLen }
func (codec) Append(b []byte, m *msg) []byte        { return encode(b, m) }
func (codec) Decode(b []byte) (samehost.Msg, error) { return decode(b) }

func encode(b []byte, m *msg) []byte {
	var tail []byte
	switch m.Type {
	case msgHello:
		tail = append(tail, m.Name...)
		if m.Auth {
			tail = append(tail, m.Nonce[:]...)
		}
	case msgHelloAck:
		if m.Auth {
			tail = append(append(tail, m.Nonce[:]...), m.MAC[:]...)
		}
	case msgAuth:
		tail = append(tail, m.MAC[:]...)
	case msgRegion:
		if m.Device {
			tail = append(tail, uint8(len(m.Handle.Type)))
			tail = append(tail, m.Handle.Type...)
			tail = binary.LittleEndian.AppendUint32(tail, uint32(int32(m.Handle.Device)))
			tail = binary.LittleEndian.AppendUint64(tail, m.Handle.Size)
			tail = binary.LittleEndian.AppendUint64(tail, m.Handle.Offset)
			tail = binary.LittleEndian.AppendUint16(tail, uint16(len(m.Handle.Data)))
			tail = append(tail, m.Handle.Data...)
		}
	}
	var h [headerLen]byte
	binary.LittleEndian.PutUint32(h[0:], wireMagic)
	h[4], h[5] = wireVersion, m.Type
	if m.Auth {
		h[6] |= flagAuth
	}
	if m.Device {
		h[6] |= flagDevice
	}
	h[7] = uint8(m.Perm)
	binary.LittleEndian.PutUint32(h[8:], uint32(m.Status))
	binary.LittleEndian.PutUint32(h[12:], m.Region)
	binary.LittleEndian.PutUint64(h[16:], m.Gen)
	binary.LittleEndian.PutUint64(h[24:], m.Inc)
	binary.LittleEndian.PutUint64(h[32:], m.Length)
	binary.LittleEndian.PutUint16(h[40:], uint16(len(tail)))
	return append(append(b, h[:]...), tail...)
}

// decode parses one whole message; it trusts nothing the peer sent.
func decode(b []byte) (msg, error) {
	var m msg
	if len(b) < headerLen {
		return m, fmt.Errorf("%w: %d bytes, header is %d", errMalformed, len(b), headerLen)
	}
	if mg := binary.LittleEndian.Uint32(b); mg != wireMagic {
		return m, fmt.Errorf("%w: bad magic %#x", errMalformed, mg)
	}
	if b[4] != wireVersion {
		return m, fmt.Errorf("%w: version %d, this side speaks %d", errVersion, b[4], wireVersion)
	}
	m.Type = b[5]
	if m.Type == 0 || m.Type >= samehost.MsgTypeLimit {
		return m, fmt.Errorf("%w: unknown type %d", errMalformed, m.Type)
	}
	flags := b[6]
	if flags&^(flagAuth|flagDevice) != 0 || flags&flagDevice != 0 && m.Type != msgRegion ||
		flags&flagAuth != 0 && m.Type != msgHello && m.Type != msgHelloAck && m.Type != msgAuth {
		return m, fmt.Errorf("%w: type %d with flags %#x", errMalformed, m.Type, flags)
	}
	m.Auth, m.Device = flags&flagAuth != 0, flags&flagDevice != 0
	m.Perm = sdk.Perm(b[7])
	m.Status = ring.Status(int32(binary.LittleEndian.Uint32(b[8:])))
	if !m.Status.Valid() {
		return m, fmt.Errorf("%w: unknown status %d", errMalformed, m.Status)
	}
	m.Region = binary.LittleEndian.Uint32(b[12:])
	m.Gen = binary.LittleEndian.Uint64(b[16:])
	m.Inc = binary.LittleEndian.Uint64(b[24:])
	m.Length = binary.LittleEndian.Uint64(b[32:])
	tail := b[headerLen:]
	if n := int(binary.LittleEndian.Uint16(b[40:])); n != len(tail) {
		return m, fmt.Errorf("%w: %d tail bytes, header announces %d", errMalformed, len(tail), n)
	}
	switch m.Type {
	case msgHello:
		n := len(tail)
		if m.Auth {
			n -= nonceLen
		}
		if n < 0 || n > MaxNameLen {
			return m, fmt.Errorf("%w: hello of %d bytes", errMalformed, len(tail))
		}
		m.Name = string(tail[:n])
		copy(m.Nonce[:], tail[n:])
		tail = nil
	case msgHelloAck:
		if m.Auth {
			if len(tail) != nonceLen+macLen {
				return m, fmt.Errorf("%w: ack proof of %d bytes", errMalformed, len(tail))
			}
			copy(m.Nonce[:], tail)
			copy(m.MAC[:], tail[nonceLen:])
			tail = nil
		}
	case msgAuth:
		if !m.Auth || len(tail) != macLen {
			return m, fmt.Errorf("%w: an auth message without its proof", errMalformed)
		}
		copy(m.MAC[:], tail)
		tail = nil
	case msgRegion:
		if m.Device {
			var err error
			if tail, err = decodeHandle(tail, &m.Handle); err != nil {
				return m, err
			}
		}
	}
	if len(tail) != 0 {
		return m, fmt.Errorf("%w: type %d with %d stray tail bytes", errMalformed, m.Type, len(tail))
	}
	if m.Type == msgRegion && m.Status == ring.StatusOK {
		if m.Perm != sdk.PermRemoteRead && m.Perm != sdk.PermRemoteReadWrite {
			return m, fmt.Errorf("%w: region %d offered with permission %d", errMalformed, m.Region, m.Perm)
		}
		if m.Length == 0 || m.Length > 1<<46 {
			return m, fmt.Errorf("%w: region %d length %d", errMalformed, m.Region, m.Length)
		}
		if m.Device {
			m.Handle.Length = m.Length
			if err := m.Handle.Check(); err != nil {
				return m, fmt.Errorf("%w: region %d: %w", errMalformed, m.Region, err)
			}
		}
	} else if m.Device {
		return m, fmt.Errorf("%w: a handle on a refusal", errMalformed)
	}
	return m, nil
}

func decodeHandle(b []byte, h *sdk.Handle) ([]byte, error) {
	bad := fmt.Errorf("%w: truncated handle", errMalformed)
	if len(b) < 1 {
		return nil, bad
	}
	n := int(b[0])
	b = b[1:]
	if len(b) < n+4+8+8+2 {
		return nil, bad
	}
	h.Type = sdk.HandleType(b[:n])
	b = b[n:]
	h.Device = int(int32(binary.LittleEndian.Uint32(b)))
	h.Size = binary.LittleEndian.Uint64(b[4:])
	h.Offset = binary.LittleEndian.Uint64(b[12:])
	dn := int(binary.LittleEndian.Uint16(b[20:]))
	b = b[22:]
	if dn == 0 || dn > maxHandleData || len(b) < dn {
		return nil, fmt.Errorf("%w: handle data of %d bytes", errMalformed, dn)
	}
	h.Data = append([]byte(nil), b[:dn]...)
	return b[dn:], nil
}

// EndpointVersion is the version of the endpoint blob this plugin writes.
const EndpointVersion = samehost.EndpointVersion

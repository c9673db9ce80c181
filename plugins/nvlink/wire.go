package nvlink

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// The region exchange runs on a SOCK_SEQPACKET unix socket: every message
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
// dialer's proof (auth.go, as shm's). A msgRegion with StatusOK and
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
	MaxNameLen = 255
	// maxHandleData bounds a handle's data on the wire.
	maxHandleData = 1024
)

const (
	msgHello     = 1
	msgHelloAck  = 2
	msgQuery     = 3
	msgRegion    = 4
	msgRevoke    = 5
	msgRevokeAck = 6
	msgAuth      = 7
	msgTypeLimit = 8
)

const (
	flagAuth   = 1
	flagDevice = 2
)

const (
	nonceLen = 16
	macLen   = 32
)

var (
	errMalformed = errors.New("nvlink: malformed message")
	errVersion   = errors.New("nvlink: protocol version mismatch")
)

type msg struct {
	typ    uint8
	perm   sdk.Perm
	status ring.Status
	region uint32
	gen    uint64
	inc    uint64
	length uint64
	name   string
	auth   bool
	nonce  [nonceLen]byte
	mac    [macLen]byte
	device bool       // msgRegion: the region is device memory, h is its handle
	h      sdk.Handle // msgRegion with device
}

func (m *msg) encode(b []byte) []byte {
	var tail []byte
	switch m.typ {
	case msgHello:
		tail = append(tail, m.name...)
		if m.auth {
			tail = append(tail, m.nonce[:]...)
		}
	case msgHelloAck:
		if m.auth {
			tail = append(append(tail, m.nonce[:]...), m.mac[:]...)
		}
	case msgAuth:
		tail = append(tail, m.mac[:]...)
	case msgRegion:
		if m.device {
			tail = append(tail, uint8(len(m.h.Type)))
			tail = append(tail, m.h.Type...)
			tail = binary.LittleEndian.AppendUint32(tail, uint32(int32(m.h.Device)))
			tail = binary.LittleEndian.AppendUint64(tail, m.h.Size)
			tail = binary.LittleEndian.AppendUint64(tail, m.h.Offset)
			tail = binary.LittleEndian.AppendUint16(tail, uint16(len(m.h.Data)))
			tail = append(tail, m.h.Data...)
		}
	}
	var h [headerLen]byte
	binary.LittleEndian.PutUint32(h[0:], wireMagic)
	h[4], h[5] = wireVersion, m.typ
	if m.auth {
		h[6] |= flagAuth
	}
	if m.device {
		h[6] |= flagDevice
	}
	h[7] = uint8(m.perm)
	binary.LittleEndian.PutUint32(h[8:], uint32(m.status))
	binary.LittleEndian.PutUint32(h[12:], m.region)
	binary.LittleEndian.PutUint64(h[16:], m.gen)
	binary.LittleEndian.PutUint64(h[24:], m.inc)
	binary.LittleEndian.PutUint64(h[32:], m.length)
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
	m.typ = b[5]
	if m.typ == 0 || m.typ >= msgTypeLimit {
		return m, fmt.Errorf("%w: unknown type %d", errMalformed, m.typ)
	}
	flags := b[6]
	if flags&^(flagAuth|flagDevice) != 0 || flags&flagDevice != 0 && m.typ != msgRegion ||
		flags&flagAuth != 0 && m.typ != msgHello && m.typ != msgHelloAck && m.typ != msgAuth {
		return m, fmt.Errorf("%w: type %d with flags %#x", errMalformed, m.typ, flags)
	}
	m.auth, m.device = flags&flagAuth != 0, flags&flagDevice != 0
	m.perm = sdk.Perm(b[7])
	m.status = ring.Status(int32(binary.LittleEndian.Uint32(b[8:])))
	if !m.status.Valid() {
		return m, fmt.Errorf("%w: unknown status %d", errMalformed, m.status)
	}
	m.region = binary.LittleEndian.Uint32(b[12:])
	m.gen = binary.LittleEndian.Uint64(b[16:])
	m.inc = binary.LittleEndian.Uint64(b[24:])
	m.length = binary.LittleEndian.Uint64(b[32:])
	tail := b[headerLen:]
	if n := int(binary.LittleEndian.Uint16(b[40:])); n != len(tail) {
		return m, fmt.Errorf("%w: %d tail bytes, header announces %d", errMalformed, len(tail), n)
	}
	switch m.typ {
	case msgHello:
		n := len(tail)
		if m.auth {
			n -= nonceLen
		}
		if n < 0 || n > MaxNameLen {
			return m, fmt.Errorf("%w: hello of %d bytes", errMalformed, len(tail))
		}
		m.name = string(tail[:n])
		copy(m.nonce[:], tail[n:])
		tail = nil
	case msgHelloAck:
		if m.auth {
			if len(tail) != nonceLen+macLen {
				return m, fmt.Errorf("%w: ack proof of %d bytes", errMalformed, len(tail))
			}
			copy(m.nonce[:], tail)
			copy(m.mac[:], tail[nonceLen:])
			tail = nil
		}
	case msgAuth:
		if !m.auth || len(tail) != macLen {
			return m, fmt.Errorf("%w: an auth message without its proof", errMalformed)
		}
		copy(m.mac[:], tail)
		tail = nil
	case msgRegion:
		if m.device {
			var err error
			if tail, err = decodeHandle(tail, &m.h); err != nil {
				return m, err
			}
		}
	}
	if len(tail) != 0 {
		return m, fmt.Errorf("%w: type %d with %d stray tail bytes", errMalformed, m.typ, len(tail))
	}
	if m.typ == msgRegion && m.status == ring.StatusOK {
		if m.perm != sdk.PermRemoteRead && m.perm != sdk.PermRemoteReadWrite {
			return m, fmt.Errorf("%w: region %d offered with permission %d", errMalformed, m.region, m.perm)
		}
		if m.length == 0 || m.length > 1<<46 {
			return m, fmt.Errorf("%w: region %d length %d", errMalformed, m.region, m.length)
		}
		if m.device {
			m.h.Length = m.length
			if err := m.h.Check(); err != nil {
				return m, fmt.Errorf("%w: region %d: %w", errMalformed, m.region, err)
			}
		}
	} else if m.device {
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
const EndpointVersion = 1

// endpoint is what peers need to reach this plugin, as JSON.
type endpoint struct {
	V       int    `json:"v"`
	Socket  string `json:"socket"`  // abstract unix socket, "@..."
	Machine string `json:"machine"` // the machine id the engine runs on
}

func encodeEndpoint(e endpoint) sdk.Endpoint {
	b, _ := json.Marshal(e)
	return b
}

func decodeEndpoint(b sdk.Endpoint) (endpoint, error) {
	var e endpoint
	if err := json.Unmarshal(b, &e); err != nil {
		return e, fmt.Errorf("endpoint is not nvlink's: %w", err)
	}
	if e.V != EndpointVersion {
		return e, fmt.Errorf("endpoint version %d, this plugin reads %d", e.V, EndpointVersion)
	}
	if !strings.HasPrefix(e.Socket, "@") || len(e.Socket) < 2 || len(e.Socket) > 107 {
		return e, fmt.Errorf("endpoint socket %q is not an abstract unix socket name", e.Socket)
	}
	return e, nil
}

package shm

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// The region-exchange protocol runs on a SOCK_SEQPACKET unix socket, so
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
// With flagAuth, a msgHello carries the dialer's 16-byte nonce after the
// name, a msgHelloAck the server's nonce and its 32-byte proof, and a
// msgAuth (sent by the dialer right after the ack) the dialer's proof
// (auth.go). A msgRegion with StatusOK carries the memfd as SCM_RIGHTS;
// nothing else carries fds.
const (
	wireMagic   = 0x4d485346 // "FSHM"
	wireVersion = 1
	headerLen   = 48
	maxMsgLen   = headerLen + MaxNameLen + nonceLen + macLen
	// MaxNameLen is the longest segment name the protocol carries.
	MaxNameLen = 255
)

// Message types.
const (
	msgHello     = 1 // dialer -> server: segment name and incarnation wanted
	msgHelloAck  = 2 // server -> dialer: StatusOK or why not
	msgQuery     = 3 // dialer -> server: map region R for me
	msgRegion    = 4 // server -> dialer: R's length, perm, generation (+ memfd)
	msgRevoke    = 5 // server -> dialer: R (generation G) was unregistered
	msgRevokeAck = 6 // dialer -> server: R (G) is unmapped here
	msgAuth      = 7 // dialer -> server: the dialer's proof of the cluster secret
	msgTypeLimit = 8
)

// flagAuth marks a hello, hello ack or auth message that carries a proof
// of the cluster secret.
const flagAuth = 1

// Sizes of the proof's parts.
const (
	nonceLen = 16
	macLen   = 32
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

var errMalformed = errors.New("shm: malformed message")

// msg is one decoded message.
type msg struct {
	typ    uint8
	perm   sdk.Perm
	status ring.Status
	region uint32
	gen    uint64
	inc    uint64
	off    uint64
	length uint64
	name   string
	// auth: the message carries a proof (flagAuth): nonce (hello, hello
	// ack) and mac (hello ack, auth).
	auth  bool
	nonce [nonceLen]byte
	mac   [macLen]byte
}

// encode appends m's wire form to b.
func (m *msg) encode(b []byte) []byte {
	var h [headerLen]byte
	binary.LittleEndian.PutUint32(h[0:], wireMagic)
	h[4] = wireVersion
	h[5] = m.typ
	h[6] = uint8(m.perm)
	if authLen(m.typ) > 0 {
		h[6] = 0
		if m.auth {
			h[6] = flagAuth
		}
	}
	h[7] = uint8(len(m.name))
	binary.LittleEndian.PutUint32(h[8:], uint32(m.status))
	binary.LittleEndian.PutUint32(h[12:], m.region)
	binary.LittleEndian.PutUint64(h[16:], m.gen)
	binary.LittleEndian.PutUint64(h[24:], m.inc)
	binary.LittleEndian.PutUint64(h[32:], m.off)
	binary.LittleEndian.PutUint64(h[40:], m.length)
	b = append(b, h[:]...)
	b = append(b, m.name...)
	if m.auth {
		switch m.typ {
		case msgHello:
			b = append(b, m.nonce[:]...)
		case msgHelloAck:
			b = append(append(b, m.nonce[:]...), m.mac[:]...)
		case msgAuth:
			b = append(b, m.mac[:]...)
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
	m.typ = b[5]
	if m.typ == 0 || m.typ >= msgTypeLimit {
		return m, fmt.Errorf("%w: unknown type %d", errMalformed, m.typ)
	}
	nameLen, proof := int(b[7]), 0
	if authLen(m.typ) > 0 {
		if b[6]&^flagAuth != 0 {
			return m, fmt.Errorf("%w: type %d with flags %#x", errMalformed, m.typ, b[6])
		}
		m.auth = b[6] == flagAuth
		if m.auth {
			proof = authLen(m.typ)
		} else if m.typ == msgAuth {
			return m, fmt.Errorf("%w: an auth message without its proof", errMalformed)
		}
	} else {
		m.perm = sdk.Perm(b[6])
	}
	if len(b) != headerLen+nameLen+proof {
		return m, fmt.Errorf("%w: %d bytes, header announces %d", errMalformed, len(b), headerLen+nameLen+proof)
	}
	if nameLen > 0 && m.typ != msgHello {
		return m, fmt.Errorf("%w: type %d carries a name", errMalformed, m.typ)
	}
	m.status = ring.Status(int32(binary.LittleEndian.Uint32(b[8:])))
	if !m.status.Valid() {
		return m, fmt.Errorf("%w: unknown status %d", errMalformed, m.status)
	}
	m.region = binary.LittleEndian.Uint32(b[12:])
	m.gen = binary.LittleEndian.Uint64(b[16:])
	m.inc = binary.LittleEndian.Uint64(b[24:])
	m.off = binary.LittleEndian.Uint64(b[32:])
	m.length = binary.LittleEndian.Uint64(b[40:])
	m.name = string(b[headerLen : headerLen+nameLen])
	rest := b[headerLen+nameLen:]
	if m.auth && m.typ != msgAuth {
		copy(m.nonce[:], rest)
		rest = rest[nonceLen:]
	}
	if m.auth && m.typ != msgHello {
		copy(m.mac[:], rest)
	}
	if m.typ == msgRegion && m.status == ring.StatusOK {
		switch m.perm {
		case sdk.PermRemoteRead, sdk.PermRemoteReadWrite:
		default:
			return m, fmt.Errorf("%w: region %d offered with permission %d", errMalformed, m.region, m.perm)
		}
		if m.length == 0 || m.length > 1<<46 || m.off > 1<<46 {
			return m, fmt.Errorf("%w: region %d range offset %d length %d", errMalformed, m.region, m.off, m.length)
		}
	}
	return m, nil
}

// errVersion marks a peer that speaks another protocol version.
var errVersion = errors.New("shm: protocol version mismatch")

// EndpointVersion is the version of the endpoint blob this plugin writes.
const EndpointVersion = 1

// endpoint is what peers need to reach this plugin: published in the
// segment descriptor as JSON.
type endpoint struct {
	V       int    `json:"v"`
	Socket  string `json:"socket"`  // abstract unix socket, "@..."
	Machine string `json:"machine"` // the machine id the engine runs on
}

func encodeEndpoint(e endpoint) sdk.Endpoint {
	b, err := json.Marshal(e)
	if err != nil {
		panic(err) // strings and an int cannot fail to marshal
	}
	return b
}

func decodeEndpoint(b sdk.Endpoint) (endpoint, error) {
	var e endpoint
	if err := json.Unmarshal(b, &e); err != nil {
		return e, fmt.Errorf("endpoint is not shm's: %w", err)
	}
	if e.V != EndpointVersion {
		return e, fmt.Errorf("endpoint version %d, this plugin reads %d", e.V, EndpointVersion)
	}
	if !strings.HasPrefix(e.Socket, "@") || len(e.Socket) < 2 || len(e.Socket) > 107 {
		return e, fmt.Errorf("endpoint socket %q is not an abstract unix socket name", e.Socket)
	}
	return e, nil
}

package tcp

// Wire protocol, version 1.
//
// Everything is little-endian. Every fixed-size part carries a CRC-32C
// (Castagnoli) of its own bytes, computed with the checksum field left out,
// so that a desynchronised or corrupted stream is caught at the next header
// instead of being taken for an address and a length.
//
// A connection is opened by the initiator (the "dialer") and serves requests
// in one direction only: the dialer sends requests, the listener answers.
//
// Hello (dialer -> listener), 24 bytes followed by NameLen bytes of name
// and, with FlagAuth, NonceSize bytes of nonce:
//
//	0  Magic        [4]byte "FRYH"
//	4  Version      u16     protocol version the dialer speaks (1)
//	6  NameLen      u16     length of the target segment name, <= MaxNameLen
//	8  Incarnation  u64     incarnation the dialer believes the target has
//	16 Flags        u32     FlagAuth (1): the dialer has a cluster secret and
//	                        a nonce follows the name; FlagFrom (2): Name
//	                        also holds the dialer's own engine name; other
//	                        bits must be 0
//	20 CRC          u32     over bytes [0,20), the name and the nonce
//	24 Name         [NameLen]byte  the target segment (engine) name; with
//	                               FlagFrom, target NUL dialer (the target
//	                               holds no NUL, the dialer is not empty)
//	   Nonce        [32]byte       with FlagAuth: the dialer's nonce, fresh
//	                               from crypto/rand for every connection
//
// Hello reply (listener -> dialer), 32 bytes:
//
//	0  Magic        [4]byte "FRYA"
//	4  Version      u16     protocol version the listener speaks
//	6  Flags        u16     FlagAuth (1): the listener has a cluster secret
//	8  Status       i32     ring.Status: 0 accept; StatusProtocol (version
//	                        mismatch), StatusPermission (one side has a
//	                        cluster secret and the other has none),
//	                        StatusStaleIncarnation (incarnation or segment
//	                        name differs), StatusShutdown (stopping)
//	12 CRC          u32     over bytes [0,12) and [16,32)
//	16 Incarnation  u64     the listener's own incarnation (0 in a refusal)
//	24 MaxFrame     u64     the largest payload the listener accepts per
//	                        frame (0 in a refusal)
//
// After a reject the listener closes the connection. A refusal comes before
// the dialer has authenticated, so it carries nothing of the listener's
// state beyond its version and FlagAuth: an accepting reply only repeats
// the incarnation the dialer already named. Magic, Version and
// Status keep their offsets in every future version so that a listener and
// a dialer of different versions can always tell each other why they part.
// A listener that does not receive a well-formed hello (bad magic, oversized
// name, bad CRC, unknown flags) drops the connection without a reply.
//
// Authentication. When hello and reply both carry FlagAuth and the reply
// accepts, the listener sends its proof right after the reply, and the
// dialer answers with its own proof before its first request (so
// authentication costs no round trip beyond the hello's):
//
// Proof (either direction), 76 bytes:
//
//	0  Magic        [4]byte "FRYP"
//	4  Status       i32     0: MAC proves the sender knows the secret;
//	                        StatusPermission (dialer only): the listener's
//	                        proof did not verify, the dialer hangs up
//	8  CRC          u32     over bytes [0,8) and [12,76)
//	12 Nonce        [32]byte  the listener's nonce (zero from the dialer)
//	44 MAC          [32]byte  HMAC-SHA256 under the cluster secret (zero
//	                          with a non-zero status)
//
// MAC = HMAC-SHA256(secret, Label || Version u16 || reply Flags u16 ||
// dialer Nonce || listener Nonce || hello Incarnation u64 || reply
// Incarnation u64 || reply MaxFrame u64 || len u16 || target segment name
// [|| len u16 || dialer name, with FlagFrom]), where
// Label is "ferry tcp auth v1: listener proof" in the listener's proof and
// "ferry tcp auth v1: dialer proof  " (two trailing spaces, the same
// length) in the dialer's. With FlagFrom the dialer's name is bound to the
// proofs, so that the listener keys its per-peer limit on an authenticated
// name. The dialer sends FlagFrom only to a listener whose endpoint says
// "from": true, so that a listener that predates it is never sent a flag
// it refuses. Both nonces are fresh per connection and the
// direction is in the label, so a proof seen on one connection is
// worthless on any other and a listener's proof cannot be reflected as a
// dialer's. The dialer checks the listener's proof before it sends its own
// (or anything else); the listener serves no request before the dialer's
// proof has verified, and on a bad one closes the connection.
//
// Request frame (dialer -> listener), 48 bytes, then for OpWrite Length
// payload bytes:
//
//	0  Magic        [4]byte "FRYQ"
//	4  Version      u8      1
//	5  Op           u8      ring.OpWrite (1) or ring.OpRead (2)
//	6  Flags        u16     0 in version 1
//	8  Seq          u64     per connection, +1 per frame, starting at 1
//	16 Incarnation  u64     target incarnation (checked on every frame)
//	24 Region       u32     target region id
//	28 CRC          u32     over bytes [0,28) and [32,48)
//	32 Offset       u64     offset in the target region
//	40 Length       u64     payload length, 1..MaxFrame of the listener
//
// Response frame (listener -> dialer), 32 bytes, then for an OpRead that
// succeeded Length payload bytes:
//
//	0  Magic        [4]byte "FRYR"
//	4  Version      u8      1
//	5  Reserved     u8      0
//	6  Reserved     u16     0
//	8  Seq          u64     the Seq of the request this answers
//	16 Status       i32     ring.Status
//	20 CRC          u32     over bytes [0,20) and [24,32)
//	24 Length       u64     payload bytes that follow (0 unless a read succeeded)
//
// Requests are pipelined: the dialer sends frames back to back without
// waiting, and the listener answers strictly in order, so the dialer matches
// responses to requests FIFO and checks that Seq agrees.
//
// The listener checks, before it touches memory: incarnation equal to its
// own, region known, permission (write needs remote-write, read needs
// remote-read, local regions never), Offset+Length inside the region without
// overflow. A request that fails a check is answered with that status; a
// rejected write's payload is read and discarded so that the stream stays in
// sync. A header that cannot be trusted (bad magic, version, CRC, flags or
// op, Length over MaxFrame) ends the connection: nothing after it can be
// framed.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/ferrydev/ferry/sdk/ring"
)

// ProtocolVersion is the wire protocol version this package speaks.
const ProtocolVersion = 1

// Sizes of the fixed parts of the wire messages.
const (
	HelloSize       = 24
	HelloReplySize  = 32
	RequestSize     = 48
	ResponseSize    = 32
	ProofSize       = 76
	NonceSize       = 32
	MACSize         = 32
	MaxNameLen      = 1024
	endpointVersion = 1
)

// FlagAuth, in a hello and in a hello reply, says that the sender has a
// cluster secret.
const FlagAuth = 1

// FlagFrom, in a hello, says that its name field also holds the dialer's
// engine name (Hello.From).
const FlagFrom = 2

// FlagRun, in a hello, says that it carries the dialer's plugin run
// (Hello.Run, sdk.StartConfig.Run) and the connection's epoch (Hello.Epoch,
// a number the run gives each connection it dials): 16 bytes after the
// names, so that the listener can fence what that run, or that one
// connection, sent (sdk.Fencer).
const FlagRun = 4

// FlagFence, in a hello with FlagRun and FlagFrom, asks the listener to
// fence the dialer's connection Hello.Epoch of run Hello.Run (one the
// dialer gave up with writes unanswered: nothing more of it may be
// applied). The connection carries no frames: after the handshake the
// listener answers with one Response (Seq 0; Length: the connections it
// fenced) and closes it.
const FlagFence = 8

// helloFlags are the flags a hello may carry.
const helloFlags = FlagAuth | FlagFrom | FlagRun | FlagFence

var (
	magicHello      = [4]byte{'F', 'R', 'Y', 'H'}
	magicHelloReply = [4]byte{'F', 'R', 'Y', 'A'}
	magicRequest    = [4]byte{'F', 'R', 'Y', 'Q'}
	magicResponse   = [4]byte{'F', 'R', 'Y', 'R'}
	magicProof      = [4]byte{'F', 'R', 'Y', 'P'}
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Errors returned by the decoders. A decoder error means the bytes cannot be
// trusted; the connection they came from is dropped.
var (
	ErrMagic    = errors.New("tcp wire: bad magic")
	ErrVersion  = errors.New("tcp wire: unsupported protocol version")
	ErrChecksum = errors.New("tcp wire: header checksum mismatch")
	ErrFlags    = errors.New("tcp wire: unknown flags")
	ErrOp       = errors.New("tcp wire: unknown op")
	ErrShort    = errors.New("tcp wire: short buffer")
	ErrName     = errors.New("tcp wire: segment name too long")
	ErrStatus   = errors.New("tcp wire: unknown status")
	ErrFrom     = errors.New("tcp wire: hello's FlagFrom without a dialer name")
)

// crcSkip computes the CRC-32C of b without the four bytes at at.
func crcSkip(b []byte, at int) uint32 {
	c := crc32.Update(0, castagnoli, b[:at])
	return crc32.Update(c, castagnoli, b[at+4:])
}

// Hello opens a connection.
type Hello struct {
	Version     uint16
	Flags       uint32
	Incarnation uint64
	Segment     string
	From        string          // the dialer's engine name: sent with FlagFrom only, empty without it
	Run         uint64          // the dialer's plugin run: sent with FlagRun only, 0 without it
	Epoch       uint64          // the connection's epoch in that run: sent with FlagRun only
	Nonce       [NonceSize]byte // sent with FlagAuth only; zero without it
}

// AppendHello appends the encoded hello to b. The nonce is sent when
// h.Flags has FlagAuth, the dialer's name when it has FlagFrom.
func AppendHello(b []byte, h Hello) []byte {
	n := len(b)
	b = append(b, make([]byte, HelloSize)...)
	b = append(b, h.Segment...)
	if h.Flags&FlagFrom != 0 {
		b = append(b, 0)
		b = append(b, h.From...)
	}
	nameLen := len(b) - n - HelloSize
	if h.Flags&FlagRun != 0 {
		b = binary.LittleEndian.AppendUint64(b, h.Run)
		b = binary.LittleEndian.AppendUint64(b, h.Epoch)
	}
	if h.Flags&FlagAuth != 0 {
		b = append(b, h.Nonce[:]...)
	}
	m := b[n:]
	copy(m[0:4], magicHello[:])
	binary.LittleEndian.PutUint16(m[4:], h.Version)
	binary.LittleEndian.PutUint16(m[6:], uint16(nameLen))
	binary.LittleEndian.PutUint64(m[8:], h.Incarnation)
	binary.LittleEndian.PutUint32(m[16:], h.Flags)
	c := crc32.Update(0, castagnoli, m[:20])
	c = crc32.Update(c, castagnoli, m[HelloSize:])
	binary.LittleEndian.PutUint32(m[20:], c)
	return b
}

// HelloRestLen returns how many bytes follow the fixed part of a hello
// (the name and, with FlagAuth, the nonce), after checking its magic, name
// length and flags, so that a reader knows how much more to read. It does
// not check the CRC, which covers what follows.
func HelloRestLen(b []byte) (int, error) {
	if len(b) < HelloSize {
		return 0, ErrShort
	}
	if [4]byte(b[0:4]) != magicHello {
		return 0, ErrMagic
	}
	n := int(binary.LittleEndian.Uint16(b[6:]))
	if n > MaxNameLen {
		return 0, ErrName
	}
	flags := binary.LittleEndian.Uint32(b[16:])
	if flags&^helloFlags != 0 {
		return 0, ErrFlags
	}
	if flags&FlagFence != 0 && flags&(FlagRun|FlagFrom) != FlagRun|FlagFrom {
		return 0, ErrFlags
	}
	if flags&FlagRun != 0 {
		n += 16
	}
	if flags&FlagAuth != 0 {
		n += NonceSize
	}
	return n, nil
}

// DecodeHello decodes a complete hello (fixed part, name and nonce). A
// version other than ProtocolVersion is not an error here: the listener
// answers it with StatusProtocol, which it can only do after decoding it.
func DecodeHello(b []byte) (Hello, error) {
	n, err := HelloRestLen(b)
	if err != nil {
		return Hello{}, err
	}
	if len(b) != HelloSize+n {
		return Hello{}, ErrShort
	}
	c := crc32.Update(0, castagnoli, b[:20])
	c = crc32.Update(c, castagnoli, b[HelloSize:])
	if c != binary.LittleEndian.Uint32(b[20:]) {
		return Hello{}, ErrChecksum
	}
	h := Hello{
		Version:     binary.LittleEndian.Uint16(b[4:]),
		Flags:       binary.LittleEndian.Uint32(b[16:]),
		Incarnation: binary.LittleEndian.Uint64(b[8:]),
	}
	name := b[HelloSize:]
	if h.Flags&FlagAuth != 0 {
		name = name[:len(name)-NonceSize]
		copy(h.Nonce[:], b[len(b)-NonceSize:])
	}
	if h.Flags&FlagRun != 0 {
		h.Run = binary.LittleEndian.Uint64(name[len(name)-16:])
		h.Epoch = binary.LittleEndian.Uint64(name[len(name)-8:])
		name = name[:len(name)-16]
	}
	if h.Flags&FlagFrom != 0 {
		i := bytes.IndexByte(name, 0)
		if i < 0 || i == len(name)-1 {
			return Hello{}, ErrFrom
		}
		h.From = string(name[i+1:])
		name = name[:i]
	}
	h.Segment = string(name)
	return h, nil
}

// HelloReply answers a hello.
type HelloReply struct {
	Version     uint16
	Flags       uint16
	Status      ring.Status
	Incarnation uint64
	MaxFrame    uint64
}

// EncodeHelloReply writes r into b, which must hold HelloReplySize bytes.
func EncodeHelloReply(b []byte, r HelloReply) {
	_ = b[HelloReplySize-1]
	copy(b[0:4], magicHelloReply[:])
	binary.LittleEndian.PutUint16(b[4:], r.Version)
	binary.LittleEndian.PutUint16(b[6:], r.Flags)
	binary.LittleEndian.PutUint32(b[8:], uint32(r.Status))
	binary.LittleEndian.PutUint64(b[16:], r.Incarnation)
	binary.LittleEndian.PutUint64(b[24:], r.MaxFrame)
	binary.LittleEndian.PutUint32(b[12:], crcSkip(b[:HelloReplySize], 12))
}

// DecodeHelloReply decodes a hello reply. As with DecodeHello, a foreign
// version is returned, not refused: the caller reports it.
func DecodeHelloReply(b []byte) (HelloReply, error) {
	if len(b) < HelloReplySize {
		return HelloReply{}, ErrShort
	}
	b = b[:HelloReplySize]
	if [4]byte(b[0:4]) != magicHelloReply {
		return HelloReply{}, ErrMagic
	}
	if crcSkip(b, 12) != binary.LittleEndian.Uint32(b[12:]) {
		return HelloReply{}, ErrChecksum
	}
	r := HelloReply{
		Version:     binary.LittleEndian.Uint16(b[4:]),
		Flags:       binary.LittleEndian.Uint16(b[6:]),
		Status:      ring.Status(int32(binary.LittleEndian.Uint32(b[8:]))),
		Incarnation: binary.LittleEndian.Uint64(b[16:]),
		MaxFrame:    binary.LittleEndian.Uint64(b[24:]),
	}
	if !r.Status.Valid() {
		return HelloReply{}, ErrStatus
	}
	if r.Flags&^FlagAuth != 0 {
		return HelloReply{}, ErrFlags
	}
	return r, nil
}

// Proof is one side's answer to the other's nonce in an authenticated
// handshake.
type Proof struct {
	Status ring.Status
	Nonce  [NonceSize]byte
	MAC    [MACSize]byte
}

// EncodeProof writes p into b, which must hold ProofSize bytes.
func EncodeProof(b []byte, p *Proof) {
	_ = b[ProofSize-1]
	copy(b[0:4], magicProof[:])
	binary.LittleEndian.PutUint32(b[4:], uint32(p.Status))
	copy(b[12:44], p.Nonce[:])
	copy(b[44:76], p.MAC[:])
	binary.LittleEndian.PutUint32(b[8:], crcSkip(b[:ProofSize], 8))
}

// DecodeProof decodes a proof. It does not verify the MAC: that needs the
// secret and the handshake's transcript.
func DecodeProof(b []byte, p *Proof) error {
	if len(b) < ProofSize {
		return ErrShort
	}
	b = b[:ProofSize]
	if [4]byte(b[0:4]) != magicProof {
		return ErrMagic
	}
	if crcSkip(b, 8) != binary.LittleEndian.Uint32(b[8:]) {
		return ErrChecksum
	}
	st := ring.Status(int32(binary.LittleEndian.Uint32(b[4:])))
	if !st.Valid() {
		return ErrStatus
	}
	*p = Proof{Status: st}
	copy(p.Nonce[:], b[12:44])
	copy(p.MAC[:], b[44:76])
	return nil
}

// Header is a request frame header.
type Header struct {
	Op          ring.Op
	Seq         uint64
	Incarnation uint64
	Region      uint32
	Offset      uint64
	Length      uint64
}

// EncodeHeader writes h into b, which must hold RequestSize bytes.
func EncodeHeader(b []byte, h *Header) {
	_ = b[RequestSize-1]
	copy(b[0:4], magicRequest[:])
	b[4] = ProtocolVersion
	b[5] = byte(h.Op)
	binary.LittleEndian.PutUint16(b[6:], 0)
	binary.LittleEndian.PutUint64(b[8:], h.Seq)
	binary.LittleEndian.PutUint64(b[16:], h.Incarnation)
	binary.LittleEndian.PutUint32(b[24:], h.Region)
	binary.LittleEndian.PutUint64(b[32:], h.Offset)
	binary.LittleEndian.PutUint64(b[40:], h.Length)
	binary.LittleEndian.PutUint32(b[28:], crcSkip(b[:RequestSize], 28))
}

// DecodeHeader decodes and checks a request header. It does not check Length
// against a maximum: that is the listener's configuration.
func DecodeHeader(b []byte, h *Header) error {
	if len(b) < RequestSize {
		return ErrShort
	}
	b = b[:RequestSize]
	if [4]byte(b[0:4]) != magicRequest {
		return ErrMagic
	}
	if b[4] != ProtocolVersion {
		return ErrVersion
	}
	if crcSkip(b, 28) != binary.LittleEndian.Uint32(b[28:]) {
		return ErrChecksum
	}
	if binary.LittleEndian.Uint16(b[6:]) != 0 {
		return ErrFlags
	}
	op := ring.Op(b[5])
	if op != ring.OpWrite && op != ring.OpRead {
		return ErrOp
	}
	*h = Header{
		Op:          op,
		Seq:         binary.LittleEndian.Uint64(b[8:]),
		Incarnation: binary.LittleEndian.Uint64(b[16:]),
		Region:      binary.LittleEndian.Uint32(b[24:]),
		Offset:      binary.LittleEndian.Uint64(b[32:]),
		Length:      binary.LittleEndian.Uint64(b[40:]),
	}
	return nil
}

// Response is a response frame header.
type Response struct {
	Seq    uint64
	Status ring.Status
	Length uint64
}

// EncodeResponse writes r into b, which must hold ResponseSize bytes.
func EncodeResponse(b []byte, r *Response) {
	_ = b[ResponseSize-1]
	copy(b[0:4], magicResponse[:])
	b[4] = ProtocolVersion
	b[5] = 0
	binary.LittleEndian.PutUint16(b[6:], 0)
	binary.LittleEndian.PutUint64(b[8:], r.Seq)
	binary.LittleEndian.PutUint32(b[16:], uint32(r.Status))
	binary.LittleEndian.PutUint64(b[24:], r.Length)
	binary.LittleEndian.PutUint32(b[20:], crcSkip(b[:ResponseSize], 20))
}

// DecodeResponse decodes and checks a response header.
func DecodeResponse(b []byte, r *Response) error {
	if len(b) < ResponseSize {
		return ErrShort
	}
	b = b[:ResponseSize]
	if [4]byte(b[0:4]) != magicResponse {
		return ErrMagic
	}
	if b[4] != ProtocolVersion {
		return ErrVersion
	}
	if crcSkip(b, 20) != binary.LittleEndian.Uint32(b[20:]) {
		return ErrChecksum
	}
	if b[5] != 0 || binary.LittleEndian.Uint16(b[6:]) != 0 {
		return ErrFlags
	}
	st := ring.Status(int32(binary.LittleEndian.Uint32(b[16:])))
	if !st.Valid() {
		return ErrStatus
	}
	*r = Response{
		Seq:    binary.LittleEndian.Uint64(b[8:]),
		Status: st,
		Length: binary.LittleEndian.Uint64(b[24:]),
	}
	return nil
}

// endpoint is the blob Start returns and peers pass to OpenPeer:
//
//	{"v":1,"addrs":["127.0.0.1:41234"],"max_frame":67108864,"from":true}
//
// A reader ignores fields it does not know; a different "v" is refused.
type endpoint struct {
	V        int      `json:"v"`
	Addrs    []string `json:"addrs"`
	MaxFrame uint64   `json:"max_frame,omitempty"`
	From     bool     `json:"from,omitempty"` // the listener reads FlagFrom
}

func encodeEndpoint(e endpoint) []byte {
	e.V = endpointVersion
	b, err := json.Marshal(e)
	if err != nil {
		panic(err) // only strings and integers: cannot fail
	}
	return b
}

func decodeEndpoint(b []byte) (endpoint, error) {
	var e endpoint
	if err := json.Unmarshal(b, &e); err != nil {
		return endpoint{}, fmt.Errorf("tcp endpoint: %w", err)
	}
	if e.V != endpointVersion {
		return endpoint{}, fmt.Errorf("tcp endpoint: version %d, this plugin reads version %d", e.V, endpointVersion)
	}
	if len(e.Addrs) == 0 {
		return endpoint{}, errors.New("tcp endpoint: no addresses")
	}
	for _, a := range e.Addrs {
		if a == "" || len(a) > 1024 {
			return endpoint{}, fmt.Errorf("tcp endpoint: bad address %q", a)
		}
	}
	return e, nil
}

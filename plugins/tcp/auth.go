package tcp

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
)

// Connection authentication: with a cluster secret, both ends of every
// connection prove that they know it (see the wire protocol in wire.go).
// The proofs are HMAC-SHA256 over the handshake's transcript; nothing of
// the secret crosses the wire.

// transcript is what a handshake's proofs are bound to.
type transcript struct {
	version      uint16
	dialerNonce  [NonceSize]byte
	listenNonce  [NonceSize]byte
	segment      string // the target segment named in the hello
	from         string // the dialer's engine name, with FlagFrom; "" without
	incarnation  uint64 // the incarnation the hello asked for
	run          uint64 // the dialer's plugin run, with FlagRun; 0 without
	epoch        uint64 // the connection's epoch, with FlagRun
	fence        bool   // the hello asked for a fence (FlagFence)
	listenerInc  uint64 // the listener's incarnation, from the reply
	maxFrame     uint64 // from the reply
	listenerFlag uint16 // the reply's flags
}

// Proof directions. The labels have the same length so that the encoding
// of the transcript stays unambiguous.
const (
	proofByListener = "ferry tcp auth v1: listener proof"
	proofByDialer   = "ferry tcp auth v1: dialer proof  "
)

// authMAC computes the proof of the side named by label.
func authMAC(secret []byte, label string, tr *transcript) [MACSize]byte {
	m := hmac.New(sha256.New, secret)
	var b [8]byte
	m.Write([]byte(label))
	binary.LittleEndian.PutUint16(b[:], tr.version)
	m.Write(b[:2])
	binary.LittleEndian.PutUint16(b[:], tr.listenerFlag)
	m.Write(b[:2])
	m.Write(tr.dialerNonce[:])
	m.Write(tr.listenNonce[:])
	binary.LittleEndian.PutUint64(b[:], tr.incarnation)
	m.Write(b[:])
	binary.LittleEndian.PutUint64(b[:], tr.listenerInc)
	m.Write(b[:])
	binary.LittleEndian.PutUint64(b[:], tr.maxFrame)
	m.Write(b[:])
	binary.LittleEndian.PutUint16(b[:], uint16(len(tr.segment)))
	m.Write(b[:2])
	m.Write([]byte(tr.segment))
	if tr.from != "" {
		binary.LittleEndian.PutUint16(b[:], uint16(len(tr.from)))
		m.Write(b[:2])
		m.Write([]byte(tr.from))
	}
	if tr.run != 0 {
		binary.LittleEndian.PutUint64(b[:], tr.run)
		m.Write(b[:])
		binary.LittleEndian.PutUint64(b[:], tr.epoch)
		m.Write(b[:])
		if tr.fence {
			m.Write([]byte{1})
		} else {
			m.Write([]byte{0})
		}
	}
	var out [MACSize]byte
	m.Sum(out[:0])
	return out
}

// verifyMAC reports whether mac is the proof of the side named by label,
// in constant time.
func verifyMAC(secret []byte, label string, tr *transcript, mac [MACSize]byte) bool {
	want := authMAC(secret, label, tr)
	return hmac.Equal(want[:], mac[:])
}

func newNonce() [NonceSize]byte {
	var n [NonceSize]byte
	// crypto/rand.Read does not fail (it crashes the program if the
	// kernel's generator is unusable), so the error is always nil.
	_, _ = rand.Read(n[:])
	return n
}

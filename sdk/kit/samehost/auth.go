package samehost

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
)

// Authentication with the cluster secret. Without one, any process of
// this user that finds the socket (abstract socket names are listed in
// /proc/net/unix) can say hello and be handed every remotely readable
// region. With a secret, both sides prove they know it before a region
// query is answered:
//
//	dialer -> server  hello  {segment, incarnation, nonce_d}
//	server -> dialer  ack    {incarnation, nonce_s, HMAC(secret, label+" server" | segment | incarnation | nonce_d | nonce_s)}
//	dialer -> server  auth   {HMAC(secret, label+" dialer" | segment | incarnation | nonce_s | nonce_d)}
//
// Each side checks the other's proof with a fresh nonce of its own in it,
// so an old proof cannot be replayed, and the dialer knows it talks to a
// plugin of the cluster, not a process that took the socket's name. The
// label ("ferry-shm/1") keeps one transport's proof from passing for
// another's. A server with a secret refuses a hello without a proof
// (StatusPermission) and closes a connection whose proof does not
// verify; a dialer with a secret refuses a server that sends none.

// Proof is the HMAC that role ("server" or "dialer") sends.
func Proof(secret []byte, label, role, segment string, inc uint64, first, second *[NonceLen]byte) [MACLen]byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(label + " " + role))
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(len(segment)))
	h.Write(b[:])
	h.Write([]byte(segment))
	binary.LittleEndian.PutUint64(b[:], inc)
	h.Write(b[:])
	h.Write(first[:])
	h.Write(second[:])
	var out [MACLen]byte
	h.Sum(out[:0])
	return out
}

// Verify reports whether got is the proof role must send.
func Verify(got [MACLen]byte, secret []byte, label, role, segment string, inc uint64, first, second *[NonceLen]byte) bool {
	want := Proof(secret, label, role, segment, inc, first, second)
	return hmac.Equal(got[:], want[:])
}

// NewNonce returns a fresh random nonce.
func NewNonce() (n [NonceLen]byte) {
	_, _ = rand.Read(n[:])
	return n
}

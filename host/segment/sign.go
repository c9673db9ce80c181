package segment

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
)

// MinSecretLen is the shortest cluster secret NewSigner accepts, the same
// floor as the tcp plugin's.
const MinSecretLen = 16

// Refusal errors of Signer.Decode; test for them with errors.Is.
var (
	// ErrUnsigned: the descriptor carries no MAC.
	ErrUnsigned = errors.New("descriptor is not signed")
	// ErrBadSignature: its MAC does not verify under this engine's
	// cluster secret, or it is signed for another name.
	ErrBadSignature = errors.New("descriptor signature does not verify")
)

// macField is how a signed descriptor ends: its JSON object with one more
// member, the hex MAC, written last. A reader without a secret ignores the
// unknown member; a reader with one strips it and verifies the bytes
// before it, exactly as they were written.
const macField = `,"mac":"`

// macTail is the length of macField, the hex MAC and the closing `"}`.
const macTail = len(macField) + 2*sha256.Size + len(`"}`)

// signDomain separates the descriptor key from any other use of the
// cluster secret (the tcp handshake's proofs).
const signDomain = "ferry descriptor signing key v1"

// Signer signs descriptors under a key derived from the cluster secret
// and verifies the ones peers publish. A nil *Signer means the engine has
// no secret: Encode writes unsigned descriptors and Decode accepts any,
// signed or not, without checking. Its methods are safe for concurrent
// use.
type Signer struct {
	key     [sha256.Size]byte
	refused atomic.Uint64
}

// NewSigner returns a Signer for secret (at least MinSecretLen bytes).
func NewSigner(secret []byte) (*Signer, error) {
	if len(secret) < MinSecretLen {
		return nil, fmt.Errorf("cluster secret of %d bytes is too short; use at least %d random bytes (for example `openssl rand -hex 32`), the same on every engine", len(secret), MinSecretLen)
	}
	s := &Signer{}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(signDomain))
	copy(s.key[:], m.Sum(nil))
	return s, nil
}

// Encode returns d as JSON, signed when s is not nil: the MAC covers the
// JSON (its Seq with the rest), the engine name and the incarnation.
func (s *Signer) Encode(d *Descriptor) ([]byte, error) {
	b, err := d.Encode()
	if s == nil || err != nil {
		return b, err
	}
	if len(b) < 2 || b[len(b)-1] != '}' {
		return nil, fmt.Errorf("segment %q: encoded descriptor is not a JSON object", d.Name)
	}
	mac := s.mac(d.Name, d.Incarnation, b)
	out := make([]byte, 0, len(b)-1+macTail)
	out = append(out, b[:len(b)-1]...)
	out = append(out, macField...)
	out = hex.AppendEncode(out, mac)
	return append(out, `"}`...), nil
}

// Decode parses a descriptor read from key. With s nil it is Decode. With
// a Signer the descriptor must carry a MAC that verifies, over the bytes
// as written, the name and the incarnation it states; under a metastore
// key (one holding "segments/") the name must also be the key's, so that
// a signed descriptor copied to another name is refused. Each refusal is
// counted (Refused) and wraps ErrUnsigned or ErrBadSignature.
func (s *Signer) Decode(key string, raw []byte) (*Descriptor, error) {
	if s == nil {
		return Decode(key, raw)
	}
	d, err := s.verify(key, raw)
	if err != nil {
		s.refused.Add(1)
	}
	return d, err
}

// Verify reports whether raw, read from key, is a descriptor that Decode
// accepts, without counting a refusal: a metastore server asks it of
// every write (metastore.ServerOptions.Verify), to tell engines'
// descriptors from other entries.
func (s *Signer) Verify(key string, raw []byte) bool {
	if s == nil {
		return false
	}
	_, err := s.verify(key, raw)
	return err == nil
}

func (s *Signer) verify(key string, raw []byte) (*Descriptor, error) {
	n := len(raw)
	if n < macTail+2 || !bytes.Equal(raw[n-macTail:n-macTail+len(macField)], []byte(macField)) || !bytes.HasSuffix(raw, []byte(`"}`)) {
		return nil, fmt.Errorf("%w: the descriptor at %q carries no MAC, and this engine has a cluster secret: it refuses unsigned descriptors. Give the engine that publishes it the same cluster_secret_file, or find out who else writes to the metastore", ErrUnsigned, key)
	}
	body := append(raw[:n-macTail:n-macTail], '}')
	want := make([]byte, sha256.Size)
	if _, err := hex.Decode(want, raw[n-macTail+len(macField):n-2]); err != nil {
		return nil, fmt.Errorf("%w: the descriptor at %q has a MAC that is not hex: %w", ErrBadSignature, key, err)
	}
	d, err := Decode(key, body)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSignature, err)
	}
	if !hmac.Equal(want, s.mac(d.Name, d.Incarnation, body)) {
		return nil, fmt.Errorf("%w: the descriptor at %q (engine %q, incarnation %#x) is not signed with this engine's cluster secret: it was forged or replaced, or its engine has another secret; give every engine the same cluster_secret_file", ErrBadSignature, key, d.Name, d.Incarnation)
	}
	if strings.Contains(key, "segments/") && key != "segments/"+d.Name && !strings.HasSuffix(key, "/segments/"+d.Name) {
		return nil, fmt.Errorf("%w: the descriptor at %q is engine %q's, copied to another name", ErrBadSignature, key, d.Name)
	}
	return d, nil
}

// Refused returns how many descriptors Decode has refused; 0 for nil.
func (s *Signer) Refused() uint64 {
	if s == nil {
		return 0
	}
	return s.refused.Load()
}

func (s *Signer) mac(name string, incarnation uint64, body []byte) []byte {
	m := hmac.New(sha256.New, s.key[:])
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(name)))
	m.Write(n[:])
	m.Write([]byte(name))
	binary.BigEndian.PutUint64(n[:], incarnation)
	m.Write(n[:])
	m.Write(body)
	return m.Sum(nil)
}

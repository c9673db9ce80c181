package segment

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// A blob is a descriptor framed for an application's own side channel
// (a file, an RPC of its framework), for engines that share no metastore:
//
//	offset 0   "FERRYSEG"         magic, 8 bytes
//	offset 8   version            uint16, big-endian (BlobVersion)
//	offset 10  flags              uint16, 0 (reserved)
//	offset 12  body length n      uint32, big-endian
//	offset 16  body               n bytes: the descriptor JSON, signed as
//	                              Signer.Encode signs it when the engine
//	                              has a cluster secret
//	offset 16+n sha256            32 bytes, over every byte before it
//
// The checksum catches a truncated or corrupted blob whoever reads it.
// Only the signature (with a cluster secret) stops a forged one: without
// a secret, whoever can write the blob chooses the descriptor, as with a
// metastore that is trusted.
const (
	BlobVersion = 1
	blobMagic   = "FERRYSEG"
	blobHeader  = 16
	blobSum     = sha256.Size
	// MaxBlobSize is the largest blob DecodeBlob reads: a descriptor of
	// MaxDescriptorSize and the framing.
	MaxBlobSize = blobHeader + MaxDescriptorSize + blobSum
)

// Refusal errors of DecodeBlob; test for them with errors.Is. A blob
// whose descriptor is unsigned or badly signed wraps ErrUnsigned or
// ErrBadSignature instead.
var (
	// ErrBadBlob: not a segment blob, truncated, or corrupted.
	ErrBadBlob = errors.New("not a valid segment blob")
	// ErrBlobVersion: written by a newer Ferry, in a framing this one
	// cannot read.
	ErrBlobVersion = errors.New("segment blob of an unknown version")
	// ErrBlobName: the blob describes another engine than the one the
	// caller expects.
	ErrBlobName = errors.New("segment blob of another engine")
)

// EncodeBlob frames d as a blob, its descriptor signed when s is not nil.
// The descriptor must be one a peer reads: within the caps of Decode.
func EncodeBlob(s *Signer, d *Descriptor) ([]byte, error) {
	if len(d.Buffers) > MaxBuffers {
		return nil, fmt.Errorf("export: segment %q lists %d buffers, more than the %d a peer reads", d.Name, len(d.Buffers), MaxBuffers)
	}
	if err := checkLimits(d.Name, d); err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	body, err := s.Encode(d)
	if err != nil {
		return nil, fmt.Errorf("segment %q: encode descriptor: %w", d.Name, err)
	}
	if len(body) > MaxDescriptorSize {
		return nil, fmt.Errorf("segment %q: descriptor of %d bytes is over the %d a peer reads", d.Name, len(body), MaxDescriptorSize)
	}
	out := make([]byte, blobHeader, blobHeader+len(body)+blobSum)
	copy(out, blobMagic)
	binary.BigEndian.PutUint16(out[8:], BlobVersion)
	binary.BigEndian.PutUint32(out[12:], uint32(len(body)))
	out = append(out, body...)
	sum := sha256.Sum256(out)
	return append(out, sum[:]...), nil
}

// DecodeBlob checks blob's framing and checksum and returns the
// descriptor in it, checked as Signer.Decode checks one from a
// metastore. want, when not "", is the engine name the caller expects;
// a blob of another is refused with ErrBlobName.
func DecodeBlob(s *Signer, blob []byte, want string) (*Descriptor, error) {
	n := len(blob)
	switch {
	case n < blobHeader+blobSum:
		return nil, fmt.Errorf("%w: it is %d bytes, shorter than the %d of an empty one: it is truncated or not an exported segment", ErrBadBlob, n, blobHeader+blobSum)
	case !bytes.Equal(blob[:8], []byte(blobMagic)):
		return nil, fmt.Errorf("%w: it does not start with %q: it is not from Engine.ExportSegment", ErrBadBlob, blobMagic)
	}
	if v := binary.BigEndian.Uint16(blob[8:]); v != BlobVersion {
		return nil, fmt.Errorf("%w: version %d, this engine reads version %d: export it again from an engine of this release, or upgrade this one", ErrBlobVersion, v, BlobVersion)
	}
	if f := binary.BigEndian.Uint16(blob[10:]); f != 0 {
		return nil, fmt.Errorf("%w: flags %#x are set, and version %d defines none: it is corrupted or from a newer Ferry", ErrBadBlob, f, BlobVersion)
	}
	body := int64(binary.BigEndian.Uint32(blob[12:]))
	if body > MaxDescriptorSize {
		return nil, fmt.Errorf("%w: it says its descriptor is %d bytes, over the %d a descriptor may have", ErrBadBlob, body, MaxDescriptorSize)
	}
	if want := int64(blobHeader) + body + blobSum; int64(n) != want {
		return nil, fmt.Errorf("%w: it is %d bytes, and its header says %d: it is truncated or has bytes appended", ErrBadBlob, n, want)
	}
	end := blobHeader + int(body)
	if sum := sha256.Sum256(blob[:end]); !bytes.Equal(sum[:], blob[end:]) {
		return nil, fmt.Errorf("%w: its checksum does not match its content: it was corrupted or altered on the way", ErrBadBlob)
	}
	d, err := s.Decode("segment blob", blob[blobHeader:end])
	if err != nil {
		return nil, err
	}
	if want != "" && d.Name != want {
		return nil, fmt.Errorf("%w: it describes engine %q, and %q was expected: check which engine's blob the side channel delivered", ErrBlobName, d.Name, want)
	}
	return d, nil
}

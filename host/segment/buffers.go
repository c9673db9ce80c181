package segment

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ferrydev/ferry/sdk"
)

// BufferList is a descriptor's registered buffers. Up to PackAbove
// buffers its JSON is an array of objects, as schema 1 has always written
// it (about 100 bytes a buffer, so 10,000 buffers would take 1 MB). Past
// PackAbove it is one base64 string of the packed form (about 7 bytes a
// buffer for buffers laid out back to back), and Descriptor.Encode writes
// schema 2: an engine that reads only schema 1 refuses such a descriptor
// with "has schema version 2 ... upgrade this engine" rather than reading
// an empty buffer list. Decoding accepts either form.
//
// The packed form (version 1) is, after the base64:
//
//	'B' 1                   magic and version
//	uvarint count           of buffers
//	uvarint kinds           count of distinct locations, then each
//	  uvarint len, bytes    its text form
//	per buffer, in order:
//	  varint region delta   from the previous buffer's region (first: 0)
//	  varint base delta     from the previous buffer's end (first: 0)
//	  uvarint length
//	  uvarint perm | kind<<8  kind: index into the locations
//
// (varint: zig-zag, as encoding/binary writes it.)
type BufferList []Buffer

// PackAbove is the most buffers a descriptor lists in schema 1's JSON
// array; a longer list is packed, in schema 2.
const PackAbove = 1024

// SchemaPacked is the first schema whose buffer list may be packed.
const SchemaPacked = 2

// Caps on a packed list from outside, beyond MaxBuffers.
const (
	maxPackedKinds   = 16
	maxPackedKindLen = 64
	packMagic        = 'B'
	packVersion      = 1
)

// schemaFor is the lowest schema that carries a list of n buffers.
func schemaFor(n int) int {
	if n > PackAbove {
		return SchemaPacked
	}
	return 1
}

// MarshalJSON writes the list as schema 1's array, or packed past
// PackAbove buffers.
func (l BufferList) MarshalJSON() ([]byte, error) {
	if len(l) <= PackAbove {
		return json.Marshal([]Buffer(l))
	}
	raw := l.pack()
	out := make([]byte, 0, base64.StdEncoding.EncodedLen(len(raw))+2)
	out = append(out, '"')
	out = base64.StdEncoding.AppendEncode(out, raw)
	return append(out, '"'), nil
}

// UnmarshalJSON reads either form.
func (l *BufferList) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '"' {
		var bufs []Buffer
		if err := json.Unmarshal(b, &bufs); err != nil {
			return err
		}
		*l = bufs
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return fmt.Errorf("packed buffer list: %w", err)
	}
	bufs, err := UnpackBuffers(raw)
	if err != nil {
		return err
	}
	*l = bufs
	return nil
}

// pack returns l in the packed form.
func (l BufferList) pack() []byte {
	var kinds []sdk.MemoryKind
	kindOf := func(k sdk.MemoryKind) uint64 {
		for i, have := range kinds {
			if have == k {
				return uint64(i)
			}
		}
		kinds = append(kinds, k)
		return uint64(len(kinds) - 1)
	}
	idx := make([]uint64, len(l))
	for i, b := range l {
		idx[i] = kindOf(b.Location)
	}
	out := make([]byte, 0, 16+8*len(l))
	out = append(out, packMagic, packVersion)
	out = binary.AppendUvarint(out, uint64(len(l)))
	out = binary.AppendUvarint(out, uint64(len(kinds)))
	for _, k := range kinds {
		out = binary.AppendUvarint(out, uint64(len(k)))
		out = append(out, k...)
	}
	var region uint32
	var end uint64
	for i, b := range l {
		out = binary.AppendVarint(out, int64(int32(b.Region-region))) // the distance, either way, mod 2^32
		out = binary.AppendVarint(out, int64(b.Base-end))
		out = binary.AppendUvarint(out, b.Length)
		out = binary.AppendUvarint(out, uint64(b.Perm)|idx[i]<<8)
		region, end = b.Region, b.Base+b.Length
	}
	return out
}

// errPacked is the cause of every refusal of a packed list.
var errPacked = errors.New("bad packed buffer list")

// UnpackBuffers decodes the packed form of a buffer list (see BufferList).
// It refuses, without allocating for them, more than MaxBuffers buffers
// or a count the input is too short to hold; ranges and permissions are
// Decode's to check.
func UnpackBuffers(raw []byte) ([]Buffer, error) {
	r := packReader{b: raw}
	if len(raw) < 2 || raw[0] != packMagic {
		return nil, fmt.Errorf("%w: no magic", errPacked)
	}
	if raw[1] != packVersion {
		return nil, fmt.Errorf("%w: version %d, this engine reads %d: upgrade this engine", errPacked, raw[1], packVersion)
	}
	r.b = raw[2:]
	n := r.uvarint("count")
	if r.err == nil && n > MaxBuffers {
		return nil, fmt.Errorf("%w: %d buffers, more than the %d a descriptor may have", errPacked, n, MaxBuffers)
	}
	if r.err == nil && n*4 > uint64(len(r.b)) { // each buffer takes at least 4 bytes
		return nil, fmt.Errorf("%w: %d buffers in %d bytes", errPacked, n, len(r.b))
	}
	nk := r.uvarint("location count")
	if r.err == nil && nk > maxPackedKinds {
		return nil, fmt.Errorf("%w: %d locations, at most %d", errPacked, nk, maxPackedKinds)
	}
	var kinds []sdk.MemoryKind
	for i := uint64(0); i < nk && r.err == nil; i++ {
		kinds = append(kinds, sdk.MemoryKind(r.bytes(maxPackedKindLen)))
	}
	if r.err != nil {
		return nil, r.err
	}
	bufs := make([]Buffer, 0, n)
	var region uint32
	var end uint64
	for i := uint64(0); i < n; i++ {
		dr := r.varint("region")
		db := r.varint("base")
		length := r.uvarint("length")
		flags := r.uvarint("flags")
		if r.err != nil {
			return nil, fmt.Errorf("buffer %d: %w", i, r.err)
		}
		k := flags >> 8
		if k >= uint64(len(kinds)) {
			return nil, fmt.Errorf("%w: buffer %d: location %d of %d", errPacked, i, k, len(kinds))
		}
		b := Buffer{Region: region + uint32(dr), Base: end + uint64(db), Length: length, Perm: sdk.Perm(flags & 0xff), Location: kinds[k]}
		bufs = append(bufs, b)
		region, end = b.Region, b.Base+b.Length
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last buffer", errPacked, len(r.b))
	}
	return bufs, nil
}

// packReader reads varints, keeping the first error.
type packReader struct {
	b   []byte
	err error
}

func (r *packReader) uvarint(what string) uint64 { return readVarint(r, what, binary.Uvarint) }

func (r *packReader) varint(what string) int64 { return readVarint(r, what, binary.Varint) }

// readVarint reads one varint of r with read (binary.Uvarint or
// binary.Varint); what names it in the error.
func readVarint[T uint64 | int64](r *packReader, what string, read func([]byte) (T, int)) T {
	if r.err != nil {
		return 0
	}
	v, n := read(r.b)
	if n <= 0 {
		r.err = fmt.Errorf("%w: %s truncated or too long", errPacked, what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *packReader) bytes(max int) string {
	n := r.uvarint("length")
	if r.err == nil && (n > uint64(max) || n > uint64(len(r.b))) {
		r.err = fmt.Errorf("%w: a string of %d bytes (at most %d, %d left)", errPacked, n, max, len(r.b))
	}
	if r.err != nil {
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

package segment

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

func TestBlobRoundTrip(t *testing.T) {
	for _, signed := range []bool{false, true} {
		var s *Signer
		if signed {
			s = mustSigner(t, "0123456789abcdef-cluster")
		}
		b, err := EncodeBlob(s, signTestDesc())
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"", "a"} {
			d, err := DecodeBlob(s, b, want)
			if err != nil {
				t.Fatalf("signed %v, want %q: a good blob is refused: %v", signed, want, err)
			}
			if d.Name != "a" || d.Incarnation != 7 || d.MachineID != "m" || len(d.Buffers) != 1 || string(d.Transports["tcp"]) != "127.0.0.1:1" {
				t.Fatalf("decoded %+v", d)
			}
		}
	}
}

// reseal recomputes a blob's checksum after an edit, as someone who
// tampers with it on purpose would.
func reseal(b []byte) []byte {
	end := len(b) - sha256.Size
	sum := sha256.Sum256(b[:end])
	copy(b[end:], sum[:])
	return b
}

func TestBlobRefuses(t *testing.T) {
	s := mustSigner(t, "0123456789abcdef-cluster")
	other := mustSigner(t, "another-secret-of-16+bytes")
	good, err := EncodeBlob(s, signTestDesc())
	if err != nil {
		t.Fatal(err)
	}
	unsigned, err := EncodeBlob(nil, signTestDesc())
	if err != nil {
		t.Fatal(err)
	}
	edit := func(b []byte, f func([]byte) []byte) []byte { return f(append([]byte(nil), b...)) }
	at := strings.Index(string(good), `"machine_id":"m"`) + len(`"machine_id":"`)
	cases := []struct {
		name   string
		s      *Signer
		blob   []byte
		want   string
		err    error
		saying string
	}{
		{"empty", s, nil, "", ErrBadBlob, "truncated"},
		{"truncated by one byte", s, good[:len(good)-1], "", ErrBadBlob, "truncated"},
		{"truncated to its header", s, good[:20], "", ErrBadBlob, "truncated"},
		{"bytes appended", s, append(append([]byte(nil), good...), 0), "", ErrBadBlob, "appended"},
		{"not a blob", s, []byte(strings.Repeat("{}", 40)), "", ErrBadBlob, "ExportSegment"},
		{"one byte flipped", s, edit(good, func(b []byte) []byte { b[at] ^= 1; return b }), "", ErrBadBlob, "checksum"},
		{"checksum flipped", s, edit(good, func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), "", ErrBadBlob, "checksum"},
		{"tampered and resealed", s, edit(good, func(b []byte) []byte { b[at] = 'x'; return reseal(b) }), "", ErrBadSignature, "not signed with this engine's cluster secret"},
		{"another secret", other, good, "", ErrBadSignature, "not signed"},
		{"unsigned to a secret", s, unsigned, "", ErrUnsigned, "carries no MAC"},
		{"newer version", s, edit(good, func(b []byte) []byte { binary.BigEndian.PutUint16(b[8:], BlobVersion+1); return reseal(b) }), "", ErrBlobVersion, "version 2"},
		{"flags set", s, edit(good, func(b []byte) []byte { b[11] = 1; return reseal(b) }), "", ErrBadBlob, "flags"},
		{"length lies", s, edit(good, func(b []byte) []byte { binary.BigEndian.PutUint32(b[12:], 1<<31); return b }), "", ErrBadBlob, "over the"},
		{"another engine", s, good, "b", ErrBlobName, `describes engine "a", and "b" was expected`},
		{"another engine, no secret", nil, unsigned, "b", ErrBlobName, `"b" was expected`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := DecodeBlob(c.s, c.blob, c.want)
			if err == nil {
				t.Fatalf("DecodeBlob accepted it: %+v", d)
			}
			if !errors.Is(err, c.err) {
				t.Fatalf("error %v does not wrap %v", err, c.err)
			}
			if !strings.Contains(err.Error(), c.saying) {
				t.Fatalf("error %q does not say %q", err, c.saying)
			}
		})
	}
}

// A blob carries a descriptor: the caps on one from a metastore apply
// when it is read, and when it is written, so that an engine never
// exports what its peers would refuse.
func TestBlobDescriptorCapped(t *testing.T) {
	d := signTestDesc()
	d.MachineID = strings.Repeat("m", MaxString+1)
	if _, err := EncodeBlob(nil, d); err == nil || !strings.Contains(err.Error(), "machine id is 257 bytes, over the cap of 256") {
		t.Fatalf("EncodeBlob of an oversized machine id: %v", err)
	}
	many := signTestDesc()
	many.Buffers = make([]Buffer, MaxBuffers+1)
	if _, err := EncodeBlob(nil, many); err == nil || !strings.Contains(err.Error(), "lists 32769 buffers, more than the 32768") {
		t.Fatalf("EncodeBlob of too many buffers: %v", err)
	}
	body, err := d.Encode()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, blobHeader, blobHeader+len(body)+sha256.Size)
	copy(b, blobMagic)
	binary.BigEndian.PutUint16(b[8:], BlobVersion)
	binary.BigEndian.PutUint32(b[12:], uint32(len(body)))
	b = reseal(append(append(b, body...), make([]byte, sha256.Size)...))
	if _, err := DecodeBlob(nil, b, ""); err == nil || !strings.Contains(err.Error(), "machine id is 257 bytes, over the cap of 256") {
		t.Fatalf("DecodeBlob of an oversized machine id: %v", err)
	}
}

// FuzzDecodeBlob: DecodeBlob never panics on bytes from outside, and a
// blob it accepts carries a descriptor within the caps that exports
// again to a blob it accepts, of the same engine and life.
func FuzzDecodeBlob(f *testing.F) {
	s, err := NewSigner([]byte("0123456789abcdef-cluster"))
	if err != nil {
		f.Fatal(err)
	}
	for _, signer := range []*Signer{nil, s} {
		b, err := EncodeBlob(signer, signTestDesc())
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, signer != nil)
	}
	f.Fuzz(func(t *testing.T, b []byte, signed bool) {
		var signer *Signer
		if signed {
			signer = s
		}
		d, err := DecodeBlob(signer, b, "")
		if err != nil || len(b) > 64<<10 {
			// Past 64 KiB, JSON's escaping ("<" becomes "\u003c") could
			// take an accepted descriptor over the size cap when written
			// again; the fuzzer's inputs stay far smaller.
			return
		}
		again, err := EncodeBlob(signer, d)
		if err != nil {
			t.Fatalf("an accepted blob does not export again: %v", err)
		}
		d2, err := DecodeBlob(signer, again, d.Name)
		if err != nil || d2.Name != d.Name || d2.Incarnation != d.Incarnation || len(d2.Buffers) != len(d.Buffers) {
			t.Fatalf("re-exported blob: %+v, %v; want %q at %#x", d2, err, d.Name, d.Incarnation)
		}
	})
}

package segment

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func signTestDesc() *Descriptor {
	return &Descriptor{Schema: SchemaVersion, Name: "a", Incarnation: 7, MachineID: "m",
		Buffers:    []Buffer{{Region: 1, Base: 0x1000, Length: 64, Perm: PermRemoteReadWrite, Location: "cpu"}},
		Transports: map[string][]byte{"tcp": []byte("127.0.0.1:1")}}
}

func mustSigner(t *testing.T, secret string) *Signer {
	t.Helper()
	s, err := NewSigner([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSignerRoundTrip(t *testing.T) {
	s := mustSigner(t, "0123456789abcdef-cluster")
	b, err := s.Encode(signTestDesc())
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.Decode("ferry/segments/a", b)
	if err != nil {
		t.Fatalf("a signed descriptor is refused: %v", err)
	}
	if d.Name != "a" || d.Incarnation != 7 || string(d.Transports["tcp"]) != "127.0.0.1:1" {
		t.Fatalf("decoded %+v", d)
	}
	// A reader without a secret reads a signed descriptor as any other.
	if _, err := (*Signer)(nil).Decode("ferry/segments/a", b); err != nil {
		t.Fatalf("a reader without a secret refuses a signed descriptor: %v", err)
	}
	if s.Refused() != 0 {
		t.Fatalf("Refused = %d after valid descriptors", s.Refused())
	}
}

func TestSignerRefuses(t *testing.T) {
	s := mustSigner(t, "0123456789abcdef-cluster")
	good, err := s.Encode(signTestDesc())
	if err != nil {
		t.Fatal(err)
	}
	unsigned, _ := signTestDesc().Encode()
	other, _ := mustSigner(t, "another-secret-of-16+").Encode(signTestDesc())
	hijacked := bytes.Replace(good, []byte("MTI3LjAuMC4xOjE="), []byte("MTI3LjAuMC4xOjI="), 1) // the tcp endpoint, base64
	if bytes.Equal(hijacked, good) {
		t.Fatal("test setup: endpoint not found in the encoding")
	}
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)-3] ^= 1 // a hex digit of the MAC: still hex
	if flipped[len(flipped)-3] > 'f' || flipped[len(flipped)-3] < '0' {
		flipped[len(flipped)-3] = '0'
	}
	cases := []struct {
		name, key string
		raw       []byte
		want      error
	}{
		{"unsigned", "ferry/segments/a", unsigned, ErrUnsigned},
		{"other secret", "ferry/segments/a", other, ErrBadSignature},
		{"endpoint replaced", "ferry/segments/a", hijacked, ErrBadSignature},
		{"mac flipped", "ferry/segments/a", flipped, ErrBadSignature},
		{"copied to another name", "ferry/segments/b", good, ErrBadSignature},
		{"garbage", "ferry/segments/a", []byte("not json"), ErrUnsigned},
		{"empty", "ferry/segments/a", nil, ErrUnsigned},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := s.Decode(c.key, c.raw)
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			if !strings.Contains(err.Error(), c.key) {
				t.Errorf("error %q does not name the key %q", err, c.key)
			}
			if got := s.Refused(); got != uint64(i+1) {
				t.Errorf("Refused = %d, want %d", got, i+1)
			}
		})
	}
}

func TestNewSignerShortSecret(t *testing.T) {
	if _, err := NewSigner([]byte("short")); err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Fatalf("err = %v, want a too-short error", err)
	}
}

func TestDecodeCaps(t *testing.T) {
	big := append([]byte(`{"schema":1,"name":"a","incarnation":1,"machine_id":"`), bytes.Repeat([]byte{'x'}, MaxDescriptorSize)...)
	big = append(big, `"}`...)
	if _, err := Decode("k", big); err == nil || !strings.Contains(err.Error(), "bytes, more than") {
		t.Fatalf("a descriptor of %d bytes: err = %v", len(big), err)
	}
	d := &Descriptor{Schema: SchemaVersion, Name: "a", Incarnation: 1}
	for i := 0; i <= MaxBuffers; i++ {
		d.Buffers = append(d.Buffers, Buffer{Region: 1, Base: uint64(i) << 12, Length: 1, Perm: PermRemoteRead})
	}
	b, _ := d.Encode()
	if _, err := Decode("k", b); err == nil || !strings.Contains(err.Error(), "buffers, more than") {
		t.Fatalf("a descriptor of %d buffers: err = %v", len(d.Buffers), err)
	}
	d.Buffers = d.Buffers[:MaxBuffers]
	b, _ = d.Encode()
	if _, err := Decode("k", b); err != nil {
		t.Fatalf("a descriptor of %d buffers (the cap): %v", len(d.Buffers), err)
	}
}

// TestSignerCoversSeq: the publication counter is signed with the rest,
// so a writer without the secret can neither raise an old descriptor's
// Seq (to outrank the owner's newer one) nor lower a new one's.
func TestSignerCoversSeq(t *testing.T) {
	s := mustSigner(t, "0123456789abcdef-cluster")
	d := signTestDesc()
	d.Seq = 1000
	b, err := s.Encode(d)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Decode("ferry/segments/a", b)
	if err != nil || got.Seq != 1000 {
		t.Fatalf("Decode = %+v, %v; want Seq 1000", got, err)
	}
	raised := bytes.Replace(b, []byte(`"seq":1000`), []byte(`"seq":9000`), 1)
	if bytes.Equal(raised, b) {
		t.Fatal("test setup: seq not found in the encoding")
	}
	if _, err := s.Decode("ferry/segments/a", raised); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("a descriptor with its Seq raised: %v; want ErrBadSignature", err)
	}
	if s.Verify("ferry/segments/a", raised) || !s.Verify("ferry/segments/a", b) {
		t.Fatal("Verify disagrees with Decode")
	}
	if n := s.Refused(); n != 1 {
		t.Fatalf("Refused = %d; want 1 (Verify counts nothing)", n)
	}
}

func TestNextSeq(t *testing.T) {
	cases := []struct {
		prev uint64
		now  int64
		want uint64
	}{
		{0, 100, 100},
		{100, 200, 200},
		{200, 200, 201}, // the clock did not move
		{500, 300, 501}, // the clock stepped back
		{0, -1, 1},
	}
	for _, c := range cases {
		if got := NextSeq(c.prev, c.now); got != c.want {
			t.Errorf("NextSeq(%d, %d) = %d, want %d", c.prev, c.now, got, c.want)
		}
	}
}

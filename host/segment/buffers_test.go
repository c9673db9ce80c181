package segment

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/sdk"
)

// kvBuffers is n buffers as a KV cache registers them: back to back,
// block by block, region ids in order.
func kvBuffers(n int) []Buffer {
	bufs := make([]Buffer, n)
	for i := range bufs {
		bufs[i] = Buffer{Region: uint32(i + 1), Base: 0x7f0000000000 + uint64(i)*4096, Length: 4096, Perm: PermRemoteReadWrite, Location: sdk.MemoryCPU}
	}
	return bufs
}

func TestTenThousandBuffersUnderOneMiB(t *testing.T) {
	d := &Descriptor{Name: "kv", Incarnation: 9, MachineID: "m", Buffers: kvBuffers(10000), Transports: map[string][]byte{"tcp": []byte("127.0.0.1:1")}}
	b, err := d.Encode()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("descriptor with 10,000 buffers: %d bytes (%.1f per buffer)", len(b), float64(len(b))/10000)
	if len(b) >= 1<<20 {
		t.Fatalf("descriptor of 10,000 buffers is %d bytes, want < 1 MiB", len(b))
	}
	got, err := Decode("k", b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Schema != SchemaPacked {
		t.Fatalf("schema %d, want %d for a packed list", got.Schema, SchemaPacked)
	}
	if !reflect.DeepEqual([]Buffer(got.Buffers), []Buffer(d.Buffers)) {
		t.Fatal("buffers differ after a round trip")
	}
	if i := Find(got.Buffers, 0x7f0000000000+5000*4096+17); i != 5000 {
		t.Fatalf("Find = %d, want 5000", i)
	}
}

// A list up to PackAbove is written exactly as before packing existed, as
// schema 1, so that engines that read only schema 1 read it.
func TestSmallListIsSchemaOneArray(t *testing.T) {
	bufs := kvBuffers(PackAbove)
	d := &Descriptor{Schema: 7, Name: "a", Incarnation: 1, Buffers: bufs}
	b, err := d.Encode()
	if err != nil {
		t.Fatal(err)
	}
	type oldDescriptor struct { // the schema-1 fields as they were
		Schema      int               `json:"schema"`
		Name        string            `json:"name"`
		Incarnation uint64            `json:"incarnation"`
		MachineID   string            `json:"machine_id"`
		Buffers     []Buffer          `json:"buffers"`
		Transports  map[string][]byte `json:"transports"`
	}
	old, _ := json.Marshal(oldDescriptor{Schema: 1, Name: "a", Incarnation: 1, Buffers: bufs})
	if !bytes.Equal(b, old) {
		t.Fatalf("a descriptor of %d buffers encodes differently from schema 1:\n%.200s\n%.200s", PackAbove, b, old)
	}
	d.Buffers = kvBuffers(PackAbove + 1)
	b, _ = d.Encode()
	if !bytes.Contains(b, []byte(`"schema":2`)) || bytes.Contains(b, []byte(`"region"`)) {
		t.Fatalf("a descriptor of %d buffers is not packed in schema 2: %.200s", PackAbove+1, b)
	}
}

// The packed form carries what the array does, whatever the order, gaps,
// permissions, locations and region ids.
func TestPackRoundTrip(t *testing.T) {
	bufs := BufferList{
		{Region: 9, Base: 0x10000, Length: 1, Perm: PermLocal, Location: sdk.MemoryCPU},
		{Region: 2, Base: 0x1000, Length: 0x100, Perm: PermRemoteRead, Location: "cuda"},
		{Region: ^uint32(0), Base: ^uint64(0) - 10, Length: 10, Perm: PermRemoteReadWrite},
		{Region: 1, Base: 0, Length: 1 << 40, Perm: PermRemoteRead, Location: sdk.MemoryCPU},
	}
	got, err := UnpackBuffers(bufs.pack())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, []Buffer(bufs)) {
		t.Fatalf("got %+v\nwant %+v", got, bufs)
	}
}

func TestUnpackRefusesBadInput(t *testing.T) {
	good := BufferList(kvBuffers(3)).pack()
	huge := []byte{packMagic, packVersion}
	huge = appendUvarint(huge, MaxBuffers+1)
	lying := []byte{packMagic, packVersion}
	lying = appendUvarint(lying, 1000) // 1,000 buffers in a few bytes
	lying = append(lying, 0, 0, 0, 0)
	cases := map[string][]byte{
		"empty":         nil,
		"no magic":      {'X', 1},
		"newer version": {packMagic, 9},
		"truncated":     good[:len(good)-1],
		"trailing":      append(append([]byte{}, good...), 0),
		"over the cap":  huge,
		"count lies":    lying,
	}
	for name, raw := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := UnpackBuffers(raw); !errors.Is(err, errPacked) {
				t.Fatalf("err = %v, want a bad packed buffer list", err)
			}
		})
	}
	// And through Decode: the refusal names the key.
	d := fmt.Sprintf(`{"schema":2,"name":"a","incarnation":1,"buffers":%q}`, base64.StdEncoding.EncodeToString(good[:len(good)-1]))
	if _, err := Decode("segments/a", []byte(d)); err == nil || !strings.Contains(err.Error(), `"segments/a"`) || !strings.Contains(err.Error(), "packed") {
		t.Fatalf("Decode of a truncated packed list: %v", err)
	}
}

// A packed list is checked as an array is: an overlap is refused.
func TestDecodeChecksPackedBuffers(t *testing.T) {
	bufs := BufferList(kvBuffers(PackAbove + 1))
	bufs[7].Length = 8192 // runs into buffer 8
	raw, _ := json.Marshal(struct {
		Schema      int        `json:"schema"`
		Name        string     `json:"name"`
		Incarnation uint64     `json:"incarnation"`
		Buffers     BufferList `json:"buffers"`
	}{2, "a", 1, bufs})
	if _, err := Decode("k", raw); err == nil || !strings.Contains(err.Error(), "overlap") {
		t.Fatalf("err = %v, want the overlap refused", err)
	}
}

func appendUvarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func FuzzUnpackBuffers(f *testing.F) {
	f.Add(BufferList(kvBuffers(3)).pack())
	f.Add([]byte{packMagic, packVersion, 0, 0})
	f.Fuzz(func(t *testing.T, raw []byte) {
		bufs, err := UnpackBuffers(raw)
		if err != nil {
			return
		}
		// What decodes packs back to what decodes the same.
		again, err := UnpackBuffers(BufferList(bufs).pack())
		if err != nil || !reflect.DeepEqual(again, bufs) {
			t.Fatalf("re-pack of %+v: %v", bufs, err)
		}
	})
}

package shm

import (
	"testing"

	"github.com/ferrydev/ferry/sdk/kit/samehost"
)

// FuzzDecode: nothing a peer sends makes decode panic, and what decodes
// encodes back to the same bytes.
func FuzzDecode(f *testing.F) {
	f.Add(encode(nil, &msg{Type: msgHello, Name: "seg", Inc: 7}))
	f.Add(encode(nil, &msg{Type: msgRegion, Perm: 3, Length: 4096, Gen: 1}))
	f.Add(encode(nil, &msg{Type: msgRevoke, Region: 5, Gen: 2}))
	f.Add(encode(nil, &msg{Type: msgHello, Name: "seg", Inc: 7, Auth: true, Nonce: [nonceLen]byte{1}}))
	f.Add(encode(nil, &msg{Type: msgHelloAck, Inc: 7, Auth: true, Nonce: [nonceLen]byte{2}, MAC: [macLen]byte{3}}))
	f.Add(encode(nil, &msg{Type: msgAuth, Auth: true, MAC: [macLen]byte{4}}))
	f.Add(encode(nil, &msg{Type: msgServed, Name: "decode-1", Tally: samehost.Tally{Writes: 1, WriteBytes: 2, Reads: 3, ReadBytes: 4}}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decode(b)
		if err != nil {
			return
		}
		if got := encode(nil, &m); string(got) != string(b) {
			t.Fatalf("re-encoded %x, want %x", got, b)
		}
	})
}

package shm

import "testing"

// FuzzDecode: nothing a peer sends makes decode panic, and what decodes
// encodes back to the same bytes.
func FuzzDecode(f *testing.F) {
	f.Add((&msg{typ: msgHello, name: "seg", inc: 7}).encode(nil))
	f.Add((&msg{typ: msgRegion, perm: 3, length: 4096, gen: 1}).encode(nil))
	f.Add((&msg{typ: msgRevoke, region: 5, gen: 2}).encode(nil))
	f.Add((&msg{typ: msgHello, name: "seg", inc: 7, auth: true, nonce: [nonceLen]byte{1}}).encode(nil))
	f.Add((&msg{typ: msgHelloAck, inc: 7, auth: true, nonce: [nonceLen]byte{2}, mac: [macLen]byte{3}}).encode(nil))
	f.Add((&msg{typ: msgAuth, auth: true, mac: [macLen]byte{4}}).encode(nil))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decode(b)
		if err != nil {
			return
		}
		if got := m.encode(nil); string(got) != string(b) {
			t.Fatalf("re-encoded %x, want %x", got, b)
		}
	})
}

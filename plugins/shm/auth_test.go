package shm_test

import (
	"testing"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// TestClusterSecret: with cluster_secret, only a plugin that proves it
// knows the same secret is answered; a process without it (or with
// another) gets no region, and a dialer with a secret refuses a server
// without one.
func TestClusterSecret(t *testing.T) {
	const s1, s2 = `cluster_secret = "0123456789abcdef-one"`, `cluster_secret = "0123456789abcdef-two"`
	cases := []struct {
		name           string
		dialer, server string
		want           ring.Status
	}{
		{"same secret", s1, s1, ring.StatusOK},
		{"dialer without the secret", "", s1, ring.StatusPermission},
		{"server without a secret", s1, "", ring.StatusPermission},
		{"another secret", s2, s1, ring.StatusPermission},
		{"no secret on either side", "", "", ring.StatusOK},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := startEngine(t, "a", 1, c.dialer)
			b := startEngine(t, "b", 2, c.server)
			local := a.region(t, 1, 1<<20, sdk.PermLocal, "a-local")
			rw := b.region(t, 1, 1<<20, sdk.PermRemoteReadWrite, "b-rw")
			fill(rw, 21)
			a.open(t, 1, b)
			got := a.do(t, ring.Descriptor{Op: ring.OpRead, LocalRegion: 1, Peer: 1, RemoteRegion: 1, Length: 4096})
			if got.Status != c.want {
				t.Fatalf("read: %v, want %v", got.Status, c.want)
			}
			st := b.stats(t)
			if c.want == ring.StatusOK {
				if string(local[:4096]) != string(rw[:4096]) {
					t.Fatal("read: wrong bytes")
				}
				return
			}
			if st["queries_served"] != 0 || a.stats(t)["maps_created"] != 0 {
				t.Fatalf("refused peer: the server answered %d queries, the dialer mapped %d regions; want 0 and 0", st["queries_served"], a.stats(t)["maps_created"])
			}
			if st["auth_failed"]+a.stats(t)["auth_failed"] == 0 {
				t.Fatal("a refusal for the secret not counted in auth_failed")
			}
		})
	}
}

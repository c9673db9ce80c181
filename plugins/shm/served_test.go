package shm_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// TestServedReported: a copies into and out of b's memory, which b's
// plugin never sees; a reports it, and b's Stats then count it as served
// to a (by a's engine name), on rail 0. a, which served nothing, counts
// nothing but says it counts.
func TestServedReported(t *testing.T) {
	a := startEngine(t, "a", 1, "")
	b := startEngine(t, "b", 2, "")
	local := a.region(t, 1, 1<<20, sdk.PermLocal, "a-local")
	b.region(t, 1, 1<<20, sdk.PermRemoteReadWrite, "b-rw")
	a.open(t, 1, b)
	fill(local, 1)
	for i := range 3 {
		if c := a.do(t, ring.Descriptor{Op: ring.OpWrite, LocalRegion: 1, Peer: 1, RemoteRegion: 1, RemoteOffset: uint64(i) << 12, Length: 4096}); c.Status != ring.StatusOK {
			t.Fatalf("write %d: %v", i, c.Status)
		}
	}
	if c := a.do(t, ring.Descriptor{Op: ring.OpRead, LocalRegion: 1, Peer: 1, RemoteRegion: 1, Length: 8192}); c.Status != ring.StatusOK {
		t.Fatalf("read: %v", c.Status)
	}
	if reporting, connected := a.tr.Reporting(1); !reporting || !connected {
		t.Fatalf("a's connection to b: reporting %v, connected %v; want both", reporting, connected)
	}
	want := map[sdk.ServedKey]uint64{
		{Rail: 0, Op: ring.OpWrite, Figure: sdk.ServedRequests, Peer: "a"}: 3,
		{Rail: 0, Op: ring.OpWrite, Figure: sdk.ServedBytes, Peer: "a"}:    3 * 4096,
		{Rail: 0, Op: ring.OpRead, Figure: sdk.ServedRequests, Peer: "a"}:  1,
		{Rail: 0, Op: ring.OpRead, Figure: sdk.ServedBytes, Peer: "a"}:     8192,
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		m := b.stats(t)
		ok := m[sdk.ServedPeersStat] == 1
		for k, v := range want {
			ok = ok && m[k.Stat()] == v
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b's served counters %v; want %v within 10s of the copies", served(m), want)
		}
		time.Sleep(20 * time.Millisecond) // polling for the report, sent within 100ms
	}
	if m := a.stats(t); m[sdk.ServedPeersStat] != 0 || len(served(m)) != 0 {
		t.Errorf("a served nothing; its Stats say %v", served(m))
	}
}

// TestServedNotReportedToOlderPeer: a peer whose endpoint does not say
// "served" (a plugin that predates reports, which would drop a
// connection on a message it does not know) is sent none: a's
// connection to it keeps no tally, so nothing can be reported.
func TestServedNotReportedToOlderPeer(t *testing.T) {
	a := startEngine(t, "a", 1, "")
	b := startEngine(t, "b", 2, "")
	local := a.region(t, 1, 1<<16, sdk.PermLocal, "a-local")
	b.region(t, 1, 1<<16, sdk.PermRemoteReadWrite, "b-rw")
	fill(local, 2)
	var ep map[string]any
	if err := json.Unmarshal(b.ep, &ep); err != nil || ep["served"] != true {
		t.Fatalf("b's endpoint %s: want served: true (%v)", b.ep, err)
	}
	delete(ep, "served")
	old := *b
	old.ep, _ = json.Marshal(ep)
	a.open(t, 1, &old)
	for i := range 3 {
		if c := a.do(t, ring.Descriptor{Op: ring.OpWrite, LocalRegion: 1, Peer: 1, RemoteRegion: 1, Length: 4096}); c.Status != ring.StatusOK {
			t.Fatalf("write %d: %v", i, c.Status)
		}
	}
	if reporting, connected := a.tr.Reporting(1); reporting || !connected {
		t.Fatalf("a's connection to a peer that takes no reports: reporting %v, connected %v; want not reporting, connected", reporting, connected)
	}
	if m := b.stats(t); len(served(m)) != 0 || m["malformed"] != 0 {
		t.Fatalf("b, with an endpoint that takes no reports: served %v, malformed %d; want none, 0", served(m), m["malformed"])
	}
}

// served returns m's served counters.
func served(m map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range m {
		if _, ok := sdk.ParseServedStat(k); ok {
			out[k] = v
		}
	}
	return out
}

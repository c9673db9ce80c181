package kit

import (
	"fmt"
	"testing"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// TestServedExport: cells add per peer, rail and op; Export writes the
// names the host parses back (sdk.ParseServedStat) with the figures
// added, marks the plugin as counting served traffic even before any,
// and files the peers beyond sdk.ServedMaxPeers under sdk.ServedOtherPeer.
func TestServedExport(t *testing.T) {
	var s Served
	m := map[string]uint64{}
	s.Export(m)
	if v, ok := m[sdk.ServedPeersStat]; !ok || v != 0 || len(m) != 1 {
		t.Fatalf("fresh Served exports %v; want only %s = 0", m, sdk.ServedPeersStat)
	}
	s.Cell("decode.a", 1).Add(ring.OpWrite, 2, 300)
	s.Cell("decode.a", 1).Add(ring.OpWrite, 1, 100) // the same cell again
	s.Cell("decode.a", 0).Add(ring.OpRead, 1, 7)
	s.Cell("", 0).Add(ring.OpWrite, 1, 5)
	for i := range sdk.ServedMaxPeers + 3 {
		s.Cell(fmt.Sprint("p", i), 0).Add(ring.OpWrite, 1, 1)
	}
	m = map[string]uint64{}
	s.Export(m)
	got := map[sdk.ServedKey]uint64{}
	for name, v := range m {
		if name == sdk.ServedPeersStat {
			continue
		}
		k, ok := sdk.ParseServedStat(name)
		if !ok {
			t.Fatalf("Export wrote %q, which ParseServedStat does not read", name)
		}
		got[k] = v
	}
	want := map[sdk.ServedKey]uint64{
		{Rail: 1, Op: ring.OpWrite, Figure: sdk.ServedRequests, Peer: "decode.a"}:   3,
		{Rail: 1, Op: ring.OpWrite, Figure: sdk.ServedBytes, Peer: "decode.a"}:      400,
		{Rail: 0, Op: ring.OpRead, Figure: sdk.ServedRequests, Peer: "decode.a"}:    1,
		{Rail: 0, Op: ring.OpRead, Figure: sdk.ServedBytes, Peer: "decode.a"}:       7,
		{Rail: 0, Op: ring.OpWrite, Figure: sdk.ServedBytes, Peer: sdk.UnknownPeer}: 5,
		// decode.a and ~unknown take two places: 62 more peers are named,
		// the last 5 share ~other.
		{Rail: 0, Op: ring.OpWrite, Figure: sdk.ServedBytes, Peer: sdk.ServedOtherPeer}:    5,
		{Rail: 0, Op: ring.OpWrite, Figure: sdk.ServedRequests, Peer: sdk.ServedOtherPeer}: 5,
		{Rail: 0, Op: ring.OpWrite, Figure: sdk.ServedBytes, Peer: "p61"}:                  1,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d; want %d", k.Stat(), got[k], v)
		}
	}
	if _, ok := got[sdk.ServedKey{Rail: 0, Op: ring.OpWrite, Figure: sdk.ServedBytes, Peer: "p62"}]; ok {
		t.Error("peer p62, beyond the bound, is named")
	}
	if n := m[sdk.ServedPeersStat]; n != sdk.ServedMaxPeers+1 {
		t.Errorf("%s = %d; want %d (the named peers and ~other)", sdk.ServedPeersStat, n, sdk.ServedMaxPeers+1)
	}
	if len(m) > 4096 {
		t.Errorf("%d counters: over the host's bound on a Stats answer", len(m))
	}
}

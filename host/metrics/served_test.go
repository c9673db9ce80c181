package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// TestSplitServed: served counters leave the plugin's counters and come
// back per peer, rail and op; a plugin without sdk.ServedPeersStat is
// unknown, its counters untouched.
func TestSplitServed(t *testing.T) {
	old := map[string]uint64{"bytes_received": 9}
	rest, served, known := SplitServed(old)
	if known || served != nil || rest["bytes_received"] != 9 || len(rest) != 1 {
		t.Fatalf("a plugin that does not count served traffic: %v, %v, %v", rest, served, known)
	}
	c := map[string]uint64{"bytes_received": 9, sdk.ServedPeersStat: 2,
		sdk.ServedKey{Rail: 1, Op: ring.OpWrite, Figure: sdk.ServedBytes, Peer: "b.x"}.Stat():    100,
		sdk.ServedKey{Rail: 1, Op: ring.OpWrite, Figure: sdk.ServedRequests, Peer: "b.x"}.Stat(): 2,
		sdk.ServedKey{Rail: 0, Op: ring.OpRead, Figure: sdk.ServedBytes, Peer: "a"}.Stat():       7,
		"served.0.bogus.bytes.a": 1, // not a served counter: kept as a plain one
	}
	rest, served, known = SplitServed(c)
	if !known || len(rest) != 3 || rest["served.0.bogus.bytes.a"] != 1 || rest[sdk.ServedPeersStat] != 2 {
		t.Fatalf("rest %v, known %v", rest, known)
	}
	want := []Served{{Peer: "a", Rail: 0, Op: "read", Bytes: 7}, {Peer: "b.x", Rail: 1, Op: "write", Requests: 2, Bytes: 100}}
	if len(served) != len(want) || served[0] != want[0] || served[1] != want[1] {
		t.Fatalf("served %+v; want %+v", served, want)
	}
}

// TestCollectorServed: a plugin that counts served traffic has
// ferry_rail_served_* series for each of its rails, named as
// ferry_rail_bytes_total names them, summed over peers, at 0 where it
// served nothing; a plugin that does not count it has none.
func TestCollectorServed(t *testing.T) {
	src := &fakeSource{plugins: []Plugin{
		{Name: "tcp", State: "running", ServedKnown: true, Served: []Served{
			{Peer: "a", Rail: 0, Op: "write", Requests: 3, Bytes: 300},
			{Peer: "b", Rail: 0, Op: "write", Requests: 1, Bytes: 50},
			{Peer: "b", Rail: 1, Op: "read", Requests: 2, Bytes: 20},
		}},
		{Name: "shm", State: "running"},
	}}
	c := NewCollector(src, time.Second, prometheus.Labels{"engine": "a"})
	defer c.Close()
	want := `
# HELP ferry_rail_served_bytes_total Bytes this engine served its peers on the rail, as its plugin counts them: op write, written into this engine's memory; op read, read from it. Only plugins that count served traffic have the series (ferry status says which do not).
# TYPE ferry_rail_served_bytes_total counter
ferry_rail_served_bytes_total{engine="a",op="read",rail="127.0.0.1:1",transport="tcp"} 0
ferry_rail_served_bytes_total{engine="a",op="read",rail="127.0.0.1:1#1",transport="tcp"} 20
ferry_rail_served_bytes_total{engine="a",op="write",rail="127.0.0.1:1",transport="tcp"} 350
ferry_rail_served_bytes_total{engine="a",op="write",rail="127.0.0.1:1#1",transport="tcp"} 0
# HELP ferry_rail_served_requests_total Requests (slices) this engine served its peers on the rail, by op, as its plugin counts them.
# TYPE ferry_rail_served_requests_total counter
ferry_rail_served_requests_total{engine="a",op="read",rail="127.0.0.1:1",transport="tcp"} 0
ferry_rail_served_requests_total{engine="a",op="read",rail="127.0.0.1:1#1",transport="tcp"} 2
ferry_rail_served_requests_total{engine="a",op="write",rail="127.0.0.1:1",transport="tcp"} 4
ferry_rail_served_requests_total{engine="a",op="write",rail="127.0.0.1:1#1",transport="tcp"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "ferry_rail_served_bytes_total", "ferry_rail_served_requests_total"); err != nil {
		t.Fatal(err)
	}
}

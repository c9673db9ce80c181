package metrics

import (
	"cmp"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Served traffic: what this engine served as the target of its peers'
// requests, as its plugins count it (sdk.ServedKey in their Stats). The
// request path's series (ferry_bytes_total, ferry_rail_bytes_total)
// count what this engine asked for; a receiving engine (a decode node
// that peers write into) asks for nothing, and its traffic is here.
// Prometheus gets it per transport, rail and op; per peer it is for
// `ferry status`.

// Served is the traffic one plugin served one peer on one rail, of one
// op: "write" (the peer wrote into this engine) or "read" (it read from
// it).
type Served struct {
	Peer     string `json:"peer"`
	Rail     int    `json:"rail"`
	Op       string `json:"op"`
	Requests uint64 `json:"requests"`
	Bytes    uint64 `json:"bytes"`
}

// SplitServed takes the served counters out of a plugin's counters. It
// returns the other counters (counters itself when it holds none), the
// plugin's served traffic in a stable order (peer, rail, op), and known:
// whether the plugin counts served traffic at all. A plugin that does
// not (an older one, or one that cannot see what it serves) leaves its
// served traffic unknown, which is not the same as none.
func SplitServed(counters map[string]uint64) (rest map[string]uint64, served []Served, known bool) {
	if _, known = counters[sdk.ServedPeersStat]; !known {
		return counters, nil, false
	}
	rest = make(map[string]uint64, len(counters))
	at := map[Served]int{} // by peer, rail and op: the index in served
	for name, v := range counters {
		k, ok := sdk.ParseServedStat(name)
		if !ok {
			rest[name] = v
			continue
		}
		key := Served{Peer: k.Peer, Rail: k.Rail, Op: opName(k.Op)}
		i, seen := at[key]
		if !seen {
			i = len(served)
			at[key] = i
			served = append(served, key)
		}
		if k.Figure == sdk.ServedBytes {
			served[i].Bytes = v
		} else {
			served[i].Requests = v
		}
	}
	slices.SortFunc(served, func(a, b Served) int {
		return cmp.Or(cmp.Compare(a.Peer, b.Peer), cmp.Compare(a.Rail, b.Rail), cmp.Compare(a.Op, b.Op))
	})
	return rest, served, true
}

func opName(op ring.Op) string {
	if op == ring.OpRead {
		return "read"
	}
	return "write"
}

// servedDescs are the served series.
type servedDescs struct{ bytes, requests *prometheus.Desc }

func newServedDescs(d func(name, help string, labels ...string) *prometheus.Desc) servedDescs {
	return servedDescs{
		bytes: d("rail_served_bytes_total", "Bytes this engine served its peers on the rail, as its plugin counts them: op write, "+
			"written into this engine's memory; op read, read from it. Only plugins that count served traffic have the series (ferry status says which do not).",
			"transport", "rail", "op"),
		requests: d("rail_served_requests_total", "Requests (slices) this engine served its peers on the rail, by op, as its plugin counts them.",
			"transport", "rail", "op"),
	}
}

func (s servedDescs) describe(ch chan<- *prometheus.Desc) {
	ch <- s.bytes
	ch <- s.requests
}

// collect sends p's served traffic summed over peers, per rail and op;
// each rail of the plugin has its series (at 0 before any traffic) when
// the plugin counts served traffic, none when it does not. railName
// names the plugin's rail i as ferry_rail_bytes_total does.
func (s servedDescs) collect(ch chan<- prometheus.Metric, p Plugin, rails []int, railName func(int) string) {
	if !p.ServedKnown {
		return
	}
	type at struct {
		rail int
		op   string
	}
	sum := map[at]Served{}
	for _, r := range rails {
		sum[at{r, "write"}], sum[at{r, "read"}] = Served{}, Served{}
	}
	for _, v := range p.Served {
		k := at{v.Rail, v.Op}
		t := sum[k]
		t.Bytes += v.Bytes
		t.Requests += v.Requests
		sum[k] = t
	}
	for k, v := range sum {
		rail := railName(k.rail)
		ch <- prometheus.MustNewConstMetric(s.bytes, prometheus.CounterValue, float64(v.Bytes), p.Name, rail, k.op)
		ch <- prometheus.MustNewConstMetric(s.requests, prometheus.CounterValue, float64(v.Requests), p.Name, rail, k.op)
	}
}

package sdk

import (
	"testing"

	"github.com/ferrydev/ferry/sdk/ring"
)

// TestParseServedStat: a served counter's name reads back as written,
// a peer with dots included; other names and malformed ones are not
// served counters.
func TestParseServedStat(t *testing.T) {
	for _, k := range []ServedKey{
		{Rail: 0, Op: ring.OpWrite, Figure: ServedBytes, Peer: "decode-1"},
		{Rail: 12, Op: ring.OpRead, Figure: ServedRequests, Peer: "a.b.c"},
	} {
		got, ok := ParseServedStat(k.Stat())
		if !ok || got != k {
			t.Errorf("ParseServedStat(%q) = %+v, %v; want %+v", k.Stat(), got, ok, k)
		}
	}
	for _, name := range []string{"bytes_sent", ServedPeersStat, "served.", "served.0.write.bytes.", "served.x.write.bytes.p",
		"served.-1.write.bytes.p", "served.01.write.bytes.p", "served.0.nop.bytes.p", "served.0.write.frames.p", "served.0.write"} {
		if k, ok := ParseServedStat(name); ok {
			t.Errorf("ParseServedStat(%q) = %+v; want not a served counter", name, k)
		}
	}
}

package pluginclient_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/internal/pluginclient"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
)

// bounded checks that err refuses an answer over a cap, saying so in a
// message that does not repeat the oversized content.
func bounded(t *testing.T, err error, parts ...string) {
	t.Helper()
	wantErr(t, err, append(parts, "over the cap")...)
	if err != nil && len(err.Error()) > 512 {
		t.Fatalf("the error is %d bytes: it repeats what the plugin sent", len(err.Error()))
	}
}

// Every size a plugin chooses in Probe, Start and Stats is capped: at the
// cap the answer is taken, one over it is refused.
func TestAnswersCapped(t *testing.T) {
	long := func(n int) string { return strings.Repeat("x", n) }
	rails := func(n int, name string) []sdk.Rail {
		r := make([]sdk.Rail, n)
		for i := range r {
			r[i] = sdk.Rail{Name: name}
		}
		return r
	}
	probe := func(pr sdk.ProbeResult) *pluginclient.Client {
		return plugintest.Connect(t, &plugintest.Mock{ProbeFunc: func(context.Context) (sdk.ProbeResult, error) { return pr, nil }}, 0)
	}
	t.Run("probe", func(t *testing.T) {
		for _, pr := range []sdk.ProbeResult{
			{Reason: long(pluginclient.MaxProbeReason)},
			{Available: true, Rails: rails(pluginclient.MaxRails, long(pluginclient.MaxRailName))},
		} {
			if _, err := probe(pr).Probe(t.Context()); err != nil {
				t.Fatalf("at the caps: %v", err)
			}
		}
		_, err := probe(sdk.ProbeResult{Reason: long(pluginclient.MaxProbeReason + 1)}).Probe(t.Context())
		bounded(t, err, "probes out of bounds", "reason is 1025 bytes")
		_, err = probe(sdk.ProbeResult{Available: true, Rails: rails(pluginclient.MaxRails+1, "r")}).Probe(t.Context())
		bounded(t, err, "lists 257 rails")
		_, err = probe(sdk.ProbeResult{Available: true, Rails: rails(2, long(pluginclient.MaxRailName+1))}).Probe(t.Context())
		bounded(t, err, "rail 0's name is 257 bytes")
	})
	t.Run("start endpoint", func(t *testing.T) {
		start := func(n int) error {
			c := plugintest.Connect(t, &plugintest.Mock{StartFunc: func(context.Context, sdk.StartConfig) (sdk.Endpoint, error) { return make(sdk.Endpoint, n), nil }}, 0)
			_, err := c.Start(t.Context(), sdk.StartConfig{Engine: "e", Incarnation: 1})
			return err
		}
		if err := start(pluginclient.MaxEndpoint); err != nil {
			t.Fatalf("at the cap: %v", err)
		}
		bounded(t, start(pluginclient.MaxEndpoint+1), "starts out of bounds", "endpoint is 65537 bytes")
	})
	t.Run("stats", func(t *testing.T) {
		stats := func(m map[string]uint64) error {
			c := plugintest.Connect(t, &plugintest.Mock{StatsFunc: func(context.Context) (map[string]uint64, error) { return m, nil }}, 0)
			got, err := c.Stats(t.Context())
			if err == nil && len(got) != len(m) {
				t.Fatalf("Stats returned %d counters of %d", len(got), len(m))
			}
			return err
		}
		many := func(n int) map[string]uint64 {
			m := make(map[string]uint64, n)
			for i := range n {
				m[fmt.Sprint("c", i)] = uint64(i)
			}
			return m
		}
		if err := stats(many(pluginclient.MaxCounters)); err != nil {
			t.Fatalf("at the count cap: %v", err)
		}
		if err := stats(map[string]uint64{long(pluginclient.MaxCounterName): 1}); err != nil {
			t.Fatalf("at the name cap: %v", err)
		}
		bounded(t, stats(many(pluginclient.MaxCounters+1)), "stats out of bounds", "4097 counters")
		bounded(t, stats(map[string]uint64{long(pluginclient.MaxCounterName + 1): 1}), "stats out of bounds", "counter name of 257 bytes")
	})
	t.Run("error text", func(t *testing.T) {
		c := plugintest.Connect(t, &plugintest.Mock{OpenPeerFunc: func(context.Context, sdk.Peer) error { return errors.New(long(1 << 20)) }}, 0)
		err := c.OpenPeer(t.Context(), sdk.Peer{ID: 1, Segment: "s", Incarnation: 1})
		wantErr(t, err, "more bytes cut")
		if n := len(err.Error()); n > pluginclient.MaxErrorText+64 {
			t.Fatalf("a plugin's 1 MiB error is kept as %d bytes", n)
		}
		c = plugintest.Connect(t, &plugintest.Mock{OpenPeerFunc: func(context.Context, sdk.Peer) error { return errors.New(long(pluginclient.MaxErrorText - 64)) }}, 0)
		err = c.OpenPeer(t.Context(), sdk.Peer{ID: 1, Segment: "s", Incarnation: 1})
		if err == nil || strings.Contains(err.Error(), "cut") {
			t.Fatalf("an error under the cap (the SDK prefixes the call): %v", err)
		}
	})
}

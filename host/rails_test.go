package host_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
)

// twoRailConfig is an engine with one TCP plugin on two loopback
// addresses, each named by a rail block, and a policy that allows only
// the second.
func twoRailConfig(name string) string {
	return fmt.Sprintf(`name = %q
plugin_dir = %q
plugin "tcp" {
  config {
    listen = ["127.0.0.1:0", "127.0.0.2:0"]
  }
}
rail "one" {
  transport = "tcp"
  device    = "127.0.0.1:0"
}
rail "two" {
  transport      = "tcp"
  device         = "127.0.0.2:0"
  bandwidth_gbps = 10
}
policy "only-two" {
  match {
    intents = ["checkpoint"]
  }
  transports = ["tcp"]
  rails      = ["two"]
}
`, name, binDir)
}

func railsOf(e *host.Engine, transport string) map[string]host.RailStatus {
	out := map[string]host.RailStatus{}
	for _, r := range quick(e).Rails {
		if r.Transport == transport {
			out[r.Label] = r
		}
	}
	return out
}

// TestRailStatsAndPolicyRails checks that every slice is accounted to the
// rail it went on: a policy that allows one rail puts every byte there,
// and a transfer it does not match spreads over both, with nothing left in
// flight once it completed.
func TestRailStatsAndPolicyRails(t *testing.T) {
	const span = 48 << 20
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := hclEngine(t, ctx, twoRailConfig("rails-a"), "rails-a.hcl")
	rs := railsOf(a, "tcp")
	if len(rs) != 2 || rs["one"].Name != "127.0.0.1:0" || rs["two"].Name != "127.0.0.2:0" || rs["two"].NominalGbps != 10 {
		t.Fatalf("rails = %+v, want one (127.0.0.1:0) and two (127.0.0.2:0, 10 Gb/s)", rs)
	}
	b := startPeer(t, "--name", "rails-b", "--metastore", a.MetastoreURL(), "--expose", fmt.Sprint(span))
	seg, err := a.OpenSegment(ctx, "rails-b")
	if err != nil {
		t.Fatal(err)
	}
	if seg.Topology == nil || len(seg.Topology.NUMANodes) == 0 {
		t.Errorf("the peer published no topology: %+v", seg.Topology)
	}
	if r := seg.Rails["tcp"]; len(r) != 1 || r[0].Name != "127.0.0.1:0" {
		t.Errorf("the peer's tcp rails = %+v, want one, 127.0.0.1:0", r)
	}
	remote := b.Ready.Buffers[0].Base
	local := randomLocal(t, ctx, a, span)

	const pinned = 8 << 20
	if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: local[:pinned], Segment: seg.ID, Remote: remote, Policy: "only-two"}); err != nil {
		t.Fatal(err)
	}
	rs = railsOf(a, "tcp")
	if rs["two"].Bytes != pinned || rs["one"].Bytes != 0 {
		t.Fatalf("after %d bytes allowed on rail two only: one carried %d, two %d", pinned, rs["one"].Bytes, rs["two"].Bytes)
	}

	if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: local[pinned:], Segment: seg.ID, Remote: remote + pinned}); err != nil {
		t.Fatal(err)
	}
	if got, want := b.ask(t, "sha256 0 %d", span), sum(local); got != want {
		t.Fatalf("peer has sha256 %s, sent %s", got, want)
	}
	rs = railsOf(a, "tcp")
	one, two := rs["one"], rs["two"]
	if one.Bytes == 0 || two.Bytes <= pinned {
		t.Errorf("an unrestricted 40 MiB write did not use both rails: one %d bytes, two %d", one.Bytes, two.Bytes)
	}
	if one.Bytes+two.Bytes != span || one.Slices+two.Slices != span>>20 {
		t.Errorf("rails carried %d bytes in %d slices, want %d in %d", one.Bytes+two.Bytes, one.Slices+two.Slices, span, span>>20)
	}
	if one.InFlight != 0 || two.InFlight != 0 || one.Errors != 0 || two.Errors != 0 {
		t.Errorf("after completion: one %+v, two %+v; want nothing in flight, no errors", one, two)
	}
	if one.EWMAGbps <= 0 || two.EWMAGbps <= 0 {
		t.Errorf("no bandwidth learnt: one %.3f Gb/s, two %.3f Gb/s", one.EWMAGbps, two.EWMAGbps)
	}
}

// TestPolicyUnknownRail: a policy naming a rail its transports do not
// have fails the engine's start, pointing at the policy's rails.
func TestPolicyUnknownRail(t *testing.T) {
	src := strings.Replace(twoRailConfig("rails-bad"), `rails      = ["two"]`, `rails      = ["two", "eth9"]`, 1)
	cfg, err := config.Parse([]byte(src), "rails-bad.hcl")
	if err != nil {
		t.Fatal(err)
	}
	e, err := host.New(context.Background(), cfg)
	if err == nil {
		e.Close()
		t.Fatal("engine started with a policy naming an unknown rail")
	}
	for _, want := range []string{`rails-bad.hcl:22:16: policy.only-two.rails: "eth9" is not a rail of tcp`, "tcp:127.0.0.1:0", "tcp:two"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q\nlacks %q", err, want)
		}
	}
	if !errors.Is(err, host.ErrInvalid) {
		t.Errorf("error %v is not ErrInvalid", err)
	}
}

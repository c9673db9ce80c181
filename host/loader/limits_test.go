package loader

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/host/segment"
	"github.com/ferrydev/ferry/internal/pluginclient"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// A plugin that describes itself with a string or list far over the caps
// (a 1 MiB name, 10,000 memory kinds) is refused at Start, with an error
// that names the field and its size but does not repeat the content.
func TestStartRefusesOversizedDescribe(t *testing.T) {
	path := filepath.Join(binDir, "ferry-plugin-bloat")
	cases := []struct{ bloat, want string }{
		{"name", "its name is 1048576 bytes"},
		{"version", "its version is 1048576 bytes"},
		{"kinds", "it lists 10001 memory kinds"},
		{"kind", "its memory kind 0 is 1048576 bytes"},
		{"ops", "it lists 10001 ops"},
	}
	for _, c := range cases {
		t.Run(c.bloat, func(t *testing.T) {
			t.Setenv("FERRY_TEST_BLOAT", c.bloat)
			p, err := Start(context.Background(), Spec{Name: "bloat", Path: path}, nil)
			if err == nil {
				p.Kill()
				t.Fatalf("Start accepted a plugin whose Describe sends oversized %s", c.bloat)
			}
			if !errors.Is(err, ErrPlugin) {
				t.Errorf("error %v does not wrap ErrPlugin", err)
			}
			msg := err.Error()
			if len(msg) > 1024 {
				t.Fatalf("the error is %d bytes: it repeats what the plugin sent", len(msg))
			}
			for _, w := range []string{`plugin "bloat"`, "describes itself out of bounds", c.want, "over the cap"} {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not mention %q", msg, w)
				}
			}
		})
	}
	t.Run("within the caps", func(t *testing.T) {
		t.Setenv("FERRY_TEST_BLOAT", "")
		p, err := Start(context.Background(), Spec{Name: "bloat", Path: path}, nil)
		if err != nil {
			t.Fatalf("the fixture without bloat: %v", err)
		}
		p.Kill()
	})
}

// The caps are inclusive: a string of exactly MaxDescribeString bytes and
// a list of exactly MaxDescribeList entries pass, one more does not.
func TestCheckDescriptionBounds(t *testing.T) {
	at := strings.Repeat("n", MaxDescribeString)
	over := at + "n"
	n := func(k int, v string) []string {
		s := make([]string, k)
		for i := range s {
			s[i] = v
		}
		return s
	}
	kinds := func(ss []string) []sdk.MemoryKind {
		k := make([]sdk.MemoryKind, len(ss))
		for i, s := range ss {
			k[i] = sdk.MemoryKind(s)
		}
		return k
	}
	ops := func(k int) []ring.Op { return make([]ring.Op, k) }
	desc := func(name, version string, ks []sdk.MemoryKind, o []ring.Op, ifs []string) pluginclient.Description {
		return pluginclient.Description{Info: sdk.Info{Name: name, Version: version, MemoryKinds: ks, Ops: o}, Interfaces: ifs}
	}
	slices := func(maxSlice, preferred uint64) pluginclient.Description {
		return pluginclient.Description{Info: sdk.Info{Name: "x", Version: "1", MaxSlice: maxSlice, PreferredSlice: preferred}}
	}
	cases := []struct {
		name string
		d    pluginclient.Description
		want string // "" = accepted
	}{
		{"all at the caps", desc(at, at, kinds(n(MaxDescribeList, at)), ops(MaxDescribeList), n(MaxDescribeList, at)), ""},
		{"name", desc(over, "1", nil, nil, nil), "its name is 257 bytes"},
		{"version", desc("x", over, nil, nil, nil), "its version is 257 bytes"},
		{"memory kinds", desc("x", "1", kinds(n(MaxDescribeList+1, "cpu")), nil, nil), "it lists 65 memory kinds"},
		{"one memory kind", desc("x", "1", kinds([]string{"cpu", over}), nil, nil), "its memory kind 1 is 257 bytes"},
		{"ops", desc("x", "1", nil, ops(MaxDescribeList+1), nil), "it lists 65 ops"},
		{"interfaces", desc("x", "1", nil, nil, n(MaxDescribeList+1, "Drainer")), "it lists 65 interfaces"},
		{"one interface", desc("x", "1", nil, nil, []string{over}), "its interface 0 is 257 bytes"},
		{"slices at the bounds", slices(MinDeclaredSlice, MaxDeclaredPreferredSlice), ""},
		{"largest MaxSlice", slices(MaxDeclaredSlice, 0), ""},
		{"MaxSlice over", slices(MaxDeclaredSlice+1, 0), "its MaxSlice is 1099511627777 bytes"},
		{"MaxSlice under", slices(MinDeclaredSlice-1, 0), "its MaxSlice is 4095 bytes"},
		{"PreferredSlice over", slices(0, MaxDeclaredPreferredSlice+1), "its PreferredSlice is 1073741825 bytes"},
		{"PreferredSlice under", slices(0, 1), "its PreferredSlice is 1 bytes"},
	}
	for _, c := range cases {
		err := checkDescription(c.d)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "" && err == nil:
			t.Errorf("%s: accepted, want %q", c.name, c.want)
		case c.want != "" && !strings.Contains(err.Error(), c.want):
			t.Errorf("%s: error %q, want %q", c.name, err, c.want)
		}
	}
}

// A binary whose first line on stdout runs past the handshake cap fails
// to start with an error that says so, instead of go-plugin's "Unrecognized
// remote plugin message" after buffering 64 KiB of it.
func TestStartRefusesOverlongHandshake(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ferry-plugin-chatty")
	// head is the process itself (exec), so that killing it leaves no
	// child holding stdout or stderr open: it blocks once the pipe fills.
	script := "#!/bin/sh\nexec head -c 1048576 /dev/zero\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := Start(context.Background(), Spec{Name: "chatty", Path: path}, nil)
	if err == nil {
		p.Kill()
		t.Fatal("Start accepted a binary whose handshake line is 1 MiB")
	}
	for _, w := range []string{`plugin "chatty"`, "failed to start", fmt.Sprintf("first line of over %d bytes", 16<<10), "not a Ferry plugin"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
}

// What the host takes from its own plugins it publishes, and its peers
// read under the descriptor's caps: a plugin answer the host accepts is
// never one its peers refuse.
func TestPluginCapsWithinDescriptorCaps(t *testing.T) {
	for _, c := range []struct {
		what        string
		plugin, seg int
	}{
		{"endpoint bytes", pluginclient.MaxEndpoint, segment.MaxEndpoint},
		{"rails", pluginclient.MaxRails, segment.MaxRails},
		{"rail name bytes", pluginclient.MaxRailName, segment.MaxString},
	} {
		if c.plugin > c.seg {
			t.Errorf("%s: the host takes %d from a plugin, its peers read %d", c.what, c.plugin, c.seg)
		}
	}
}

// A real plugin process whose Probe, Start, Stats or errors are over the
// caps (internal/pluginclient's) is refused call by call, with an error
// that names the answer and its size; the plugin's other answers are
// still taken.
func TestRunningPluginAnswersCapped(t *testing.T) {
	path := filepath.Join(binDir, "ferry-plugin-bloat")
	ctx := context.Background()
	call := map[string]func(p *Plugin) error{
		"probe": func(p *Plugin) error { _, err := p.Client.Probe(ctx); return err },
		"start": func(p *Plugin) error {
			_, err := p.Client.Start(ctx, sdk.StartConfig{Engine: "e", Incarnation: 1})
			return err
		},
		"stats": func(p *Plugin) error { _, err := p.Client.Stats(ctx); return err },
		"peer":  func(p *Plugin) error { return p.Client.OpenPeer(ctx, sdk.Peer{ID: 1, Segment: "s", Incarnation: 1}) },
	}
	cases := []struct{ bloat, call, want string }{
		{"reason", "probe", "its reason is 1048576 bytes, over the cap"},
		{"rails", "probe", "it lists 10000 rails, over the cap"},
		{"rail", "probe", "its rail 0's name is 1048576 bytes, over the cap"},
		{"endpoint", "start", "its endpoint is 1048576 bytes, over the cap"},
		{"counters", "stats", "10001 counters, over the cap"},
		{"counter", "stats", "a counter name of 1048576 bytes, over the cap"},
		{"error", "peer", "more bytes cut"},
	}
	for _, c := range cases {
		t.Run(c.bloat, func(t *testing.T) {
			t.Setenv("FERRY_TEST_BLOAT", c.bloat)
			p, err := Start(ctx, Spec{Name: "bloat", Path: path}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Kill()
			err = call[c.call](p)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%s: %v; want an error saying %q", c.call, err, c.want)
			}
			if len(err.Error()) > 2048 {
				t.Fatalf("the error is %d bytes: it repeats what the plugin sent", len(err.Error()))
			}
			for name, f := range call {
				if name != c.call && name != "peer" {
					if err := f(p); err != nil {
						t.Errorf("after the refused %s, %s: %v", c.call, name, err)
					}
				}
			}
		})
	}
}

// A plugin that declares a slice size or a rail far outside what any
// transport has (a MaxSlice or PreferredSlice of 2^64-1, a MaxSlice of one
// byte, a rail on NUMA node 2^30 or of NaN Gbit/s) is refused at Start or
// Probe, with an error that names the plugin, the field, the value and
// the bound. A preferred slice of 2^64-1 used to pass: every task on the
// plugin then timed out with 0 bytes moved.
func TestDeclaredNumbersBounded(t *testing.T) {
	path := filepath.Join(binDir, "ferry-plugin-bloat")
	ctx := context.Background()
	cases := []struct {
		bloat string
		probe bool // refused by Probe, not by Start
		want  []string
	}{
		{"maxslice", false, []string{"describes itself out of bounds", "its MaxSlice is 18446744073709551615 bytes", "4096 (4 KiB) to 1099511627776 bytes"}},
		{"preferred", false, []string{"its PreferredSlice is 18446744073709551615 bytes", "to 1073741824 bytes"}},
		{"tinyslice", false, []string{"its MaxSlice is 1 bytes", "4096 (4 KiB)"}},
		{"numa", true, []string{"probes out of bounds", "rail 0's NUMA node is 1073741824", "-1 (unknown) to 1023"}},
		{"bandwidth", true, []string{"probes out of bounds", "rail 0's bandwidth is NaN Gbit/s", "0 (unknown) to 100000"}},
	}
	for _, c := range cases {
		t.Run(c.bloat, func(t *testing.T) {
			t.Setenv("FERRY_TEST_BLOAT", c.bloat)
			p, err := Start(ctx, Spec{Name: "bloat", Path: path}, nil)
			if c.probe {
				if err != nil {
					t.Fatal(err)
				}
				defer p.Kill()
				_, err = p.Client.Probe(ctx)
			} else if err == nil {
				p.Kill()
				t.Fatalf("Start accepted a plugin that declares %s out of bounds", c.bloat)
			}
			if err == nil {
				t.Fatalf("Probe accepted a plugin that declares %s out of bounds", c.bloat)
			}
			for _, w := range append([]string{`plugin "bloat"`}, c.want...) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

package host_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/control"
	"github.com/ferrydev/ferry/host/segment"
)

// A plugin whose Probe answer is over the caps (a 1 MiB reason) is kept
// out with its reason, which names the answer and its size, and an engine
// with strict = false runs on its other plugins: a transfer through tcp
// moves verified bytes. (A strict engine refuses to start: see
// TestPluginDeclaringAnAbsurdSliceRefused.)
func TestPluginOutOfBoundsLeavesEngineRunning(t *testing.T) {
	t.Setenv("FERRY_TEST_BLOAT", "reason")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := filepath.Join(t.TempDir(), "bounds.hcl")
	src := fmt.Sprintf("name = \"bounds-a\"\nstrict = false\nplugin_dir = %q\nmetastore {\n  kind = \"none\"\n}\nplugin \"tcp\" {\n  config {\n    listen = [\"127.0.0.1:0\"]\n  }\n}\nplugin \"bloat\" {}\n", binDir)
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	a := engineFrom(t, p)
	var reason string
	for _, st := range a.Status(ctx).Plugins {
		switch st.Name {
		case "bloat":
			if st.State == "running" {
				t.Fatalf("the bloated plugin runs: %+v", st)
			}
			reason = st.Reason
		case "tcp":
			if st.State != "running" {
				t.Fatalf("tcp is %s: %s", st.State, st.Reason)
			}
		}
	}
	if !strings.Contains(reason, "probes out of bounds") || !strings.Contains(reason, "1048576 bytes") || len(reason) > 2048 {
		t.Fatalf("the bloated plugin's reason is %d bytes: %.300q; want it to say it probes out of bounds, and how large", len(reason), reason)
	}

	b := blobEngine(t, "bounds-b", "")
	lb, rb := remoteBuffer(t, ctx, b, 4096)
	seg, _, err := exchange(t, b, a)
	if err != nil {
		t.Fatal(err)
	}
	la, _ := a.Allocate(4096)
	if _, err := a.Register(ctx, la, host.LocalOnly); err != nil {
		t.Fatal(err)
	}
	copy(la, pattern(4096, 0, 7))
	if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: la, Segment: seg.ID, Remote: rb}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(lb, la) {
		t.Fatal("the peer's bytes differ from what was written")
	}
}

// fakePeer is a control service that serves whatever descriptor it is
// given: a peer that chooses the size of every field.
type fakePeer struct{ desc []byte }

func (f *fakePeer) Descriptor() ([]byte, error)        { return f.desc, nil }
func (f *fakePeer) Identity() (string, uint64)         { return "fake", 1 }
func (f *fakePeer) Status() ([]byte, error)            { return []byte("{}"), nil }
func (f *fakePeer) Deliver(control.Notification) error { return nil }

// A descriptor with a field over its cap, from the metastore or from a
// peer's control service, is refused by OpenSegment with an error naming
// the field and its size (not its content); a segment already open is
// untouched and still moves bytes.
func TestOversizedDescriptorRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := newEngine(t, "bounds-m")
	b := startPeer(t, "--name", "bounds-mb", "--metastore", a.MetastoreURL(), "--expose", "64KiB", "--pattern", "3")
	seg, err := a.OpenSegment(ctx, "bounds-mb")
	if err != nil {
		t.Fatal(err)
	}
	local := localBuffer(t, ctx, a, 64<<10)
	read := host.Request{Op: host.Read, Local: local, Segment: seg.ID, Remote: b.Ready.Buffers[0].Base}

	huge := strings.Repeat("x", 1<<20)
	transports := map[string][]byte{}
	for i := range 100 {
		transports[fmt.Sprint("t", i)] = []byte("e")
	}
	// Signed with the cluster's secret: the caps hold for a peer that
	// knows it too.
	signer, err := segment.NewSigner(envSecret(t))
	if err != nil {
		t.Fatal(err)
	}
	evil := func(f func(d *segment.Descriptor)) string {
		d := &segment.Descriptor{Schema: 1, Name: "evil", Incarnation: 1, MachineID: "m", Transports: map[string][]byte{"tcp": []byte("e")}}
		f(d)
		raw, err := signer.Encode(d)
		if err != nil {
			t.Fatal(err)
		}
		return string(raw)
	}
	cases := []struct{ name, desc, saying string }{
		{"machine id", evil(func(d *segment.Descriptor) { d.MachineID = huge }), "its machine id is 1048576 bytes, over the cap"},
		{"transports", evil(func(d *segment.Descriptor) { d.Transports = transports }), "lists 100 transports, over the cap"},
		{"endpoint", evil(func(d *segment.Descriptor) { d.Transports["tcp"] = make([]byte, 3<<20/4) }), `transport "tcp"'s endpoint is 786432 bytes, over the cap`},
		{"rails", evil(func(d *segment.Descriptor) {
			d.Rails = map[string][]segment.RailInfo{"tcp": make([]segment.RailInfo, 1000)}
		}), `lists 1000 rails of transport "tcp", over the cap`},
	}
	check := func(t *testing.T, err error, saying string) {
		t.Helper()
		if !errors.Is(err, host.ErrSegmentNotFound) || !strings.Contains(err.Error(), saying) || len(err.Error()) > 1024 {
			t.Fatalf("OpenSegment: %.400v; want ErrSegmentNotFound saying %q, briefly", err, saying)
		}
	}
	for _, c := range cases {
		t.Run("metastore/"+c.name, func(t *testing.T) {
			if err := putRaw(a.MetastoreURL(), "ferry/segments/evil", c.desc); err != nil {
				t.Fatal(err)
			}
			_, err := a.OpenSegment(ctx, "evil")
			check(t, err, c.saying)
		})
		t.Run("peer/"+c.name, func(t *testing.T) {
			s, err := control.Listen("127.0.0.1:0", &fakePeer{desc: []byte(c.desc)}, control.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			_, err = a.OpenSegment(ctx, s.Addr())
			check(t, err, c.saying)
		})
	}
	if err := a.Transfer(ctx, read); err != nil {
		t.Fatalf("the open segment after the refusals: %v", err)
	}
	if want := pattern(len(local), 0, 3); !bytes.Equal(local, want) {
		t.Fatal("the bytes read from the open segment differ from the peer's")
	}
}

// A plugin that declares a preferred slice of 2^64-1 keeps a strict
// engine from starting, with an error that names the plugin, the field,
// the value and the bound. It used to start: every task routed to the
// plugin was cut into 0 slices and timed out with 0 bytes moved.
func TestPluginDeclaringAnAbsurdSliceRefused(t *testing.T) {
	t.Setenv("FERRY_TEST_BLOAT", "preferred")
	src := fmt.Sprintf("name = \"bounds-c\"\nplugin_dir = %q\nmetastore {\n  kind = \"none\"\n}\nplugin \"bloat\" {}\n", binDir)
	cfg, err := config.Parse([]byte(src), "bounds-c.hcl")
	if err != nil {
		t.Fatal(err)
	}
	e, err := host.New(context.Background(), cfg)
	if err == nil {
		e.Close()
		t.Fatal("an engine started on a plugin that declares a preferred slice of 2^64-1 bytes")
	}
	for _, want := range []string{`plugin "bloat"`, "PreferredSlice is 18446744073709551615 bytes", "1073741824 bytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// A plugin whose Probe is refused (a rail on NUMA node 2^30) has failed:
// it is not a plugin whose hardware is absent, which a strict engine
// forgives, so a strict engine does not start on its other plugins.
func TestPluginProbeOutOfBoundsFailsAStrictEngine(t *testing.T) {
	t.Setenv("FERRY_TEST_BLOAT", "numa")
	src := fmt.Sprintf("name = \"bounds-d\"\nplugin_dir = %q\nmetastore {\n  kind = \"none\"\n}\nplugin \"tcp\" {\n  config {\n    listen = [\"127.0.0.1:0\"]\n  }\n}\nplugin \"bloat\" {}\n", binDir)
	cfg, err := config.Parse([]byte(src), "bounds-d.hcl")
	if err != nil {
		t.Fatal(err)
	}
	e, err := host.New(context.Background(), cfg)
	if err == nil {
		e.Close()
		t.Fatal("a strict engine started without a plugin whose probe was refused")
	}
	for _, want := range []string{`plugin "bloat"`, "probes out of bounds", "NUMA node is 1073741824", "-1 (unknown) to 1023"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

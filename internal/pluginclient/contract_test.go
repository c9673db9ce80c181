package pluginclient_test

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ferrydev/ferry/internal/pluginclient"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
	"github.com/ferrydev/ferry/sdk/shm"
)

// The contract tests drive the host's client against the SDK's server
// over an in-process gRPC connection (plugintest.Connect) with a mock
// transport: every call's conversion both ways, its errors, and the
// optional interfaces, without a plugin binary.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one mentioning %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not mention %q", err, p)
		}
	}
}

func TestDescribeCarriesCapabilities(t *testing.T) {
	info := sdk.Info{
		Name: "vendor", Version: "1.2.3",
		Ops:      []ring.Op{ring.OpWrite, ring.OpRead},
		MaxSlice: 16 << 20, PreferredSlice: 4 << 20,
		SameMachineOnly: true, MemoryKinds: []sdk.MemoryKind{sdk.MemoryCPU, sdk.MemoryCUDA},
	}
	describe := func(context.Context) (sdk.Info, error) { return info, nil }
	cases := []struct {
		name       string
		impl       sdk.Transport
		protocol   int
		want       sdk.Info
		interfaces []string
	}{
		{"protocol 2", &plugintest.Mock{DescribeFunc: describe}, 2, info, nil},
		{"protocol 2, drainer", &plugintest.MockDrainer{Mock: plugintest.Mock{DescribeFunc: describe}}, 2, info, []string{sdk.InterfaceDrainer}},
		// A session negotiated at version 1 carries no capabilities: what a
		// protocol-1 plugin sends, read as "unknown".
		{"protocol 1", &plugintest.MockDrainer{Mock: plugintest.Mock{DescribeFunc: describe}}, 1,
			sdk.Info{Name: "vendor", Version: "1.2.3", SameMachineOnly: true, MemoryKinds: []sdk.MemoryKind{sdk.MemoryCPU, sdk.MemoryCUDA}}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := plugintest.Connect(t, c.impl, c.protocol).Describe(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(d.Info, c.want) {
				t.Errorf("info %+v, want %+v", d.Info, c.want)
			}
			if int(d.Protocol) != c.protocol {
				t.Errorf("protocol %d, want %d", d.Protocol, c.protocol)
			}
			if !reflect.DeepEqual(d.Interfaces, c.interfaces) {
				t.Errorf("interfaces %q, want %q", d.Interfaces, c.interfaces)
			}
			if d.Implements(sdk.InterfaceDrainer) != (c.interfaces != nil) {
				t.Errorf("Implements(drainer) = %v with interfaces %q", d.Implements(sdk.InterfaceDrainer), d.Interfaces)
			}
		})
	}
}

func TestUnknownCapabilitiesMeanDefaults(t *testing.T) {
	d, err := plugintest.Connect(t, &plugintest.Mock{}, 1).Describe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if d.MaxSlice != 0 || d.PreferredSlice != 0 || d.Ops != nil {
		t.Fatalf("capabilities of a protocol-1 session: %+v, want all zero", d.Info)
	}
	if !d.Carries(ring.OpWrite) || !d.Carries(ring.OpRead) || d.Carries(ring.OpNop) {
		t.Fatal("a plugin with unknown ops must be taken to carry writes and reads, and only those")
	}
	readOnly := sdk.Info{Ops: []ring.Op{ring.OpRead}}
	if readOnly.Carries(ring.OpWrite) || !readOnly.Carries(ring.OpRead) {
		t.Fatal("a plugin that lists only reads must carry only reads")
	}
}

func TestDescribeErrors(t *testing.T) {
	bad := &plugintest.Mock{DescribeFunc: func(context.Context) (sdk.Info, error) {
		return sdk.Info{Name: "x", Ops: []ring.Op{ring.OpNop}}, nil
	}}
	_, err := plugintest.Connect(t, bad, 0).Describe(t.Context())
	wantErr(t, err, "describe", "op 4 is not a capability", "Internal")

	failing := &plugintest.Mock{DescribeFunc: func(context.Context) (sdk.Info, error) { return sdk.Info{}, errors.New("no firmware") }}
	_, err = plugintest.Connect(t, failing, 0).Describe(t.Context())
	wantErr(t, err, "describe: no firmware")
}

func TestProbe(t *testing.T) {
	want := sdk.ProbeResult{Available: false, Reason: "no NIC", Rails: []sdk.Rail{
		{Name: "mlx5_0", NUMANode: 1, BandwidthGbps: 200}, {Name: "mlx5_1", NUMANode: -1, BandwidthGbps: 0.5},
	}}
	c := plugintest.Connect(t, &plugintest.Mock{ProbeFunc: func(context.Context) (sdk.ProbeResult, error) { return want, nil }}, 0)
	got, err := c.Probe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("probe %+v, want %+v", got, want)
	}
	c = plugintest.Connect(t, &plugintest.Mock{ProbeFunc: func(context.Context) (sdk.ProbeResult, error) { return sdk.ProbeResult{}, errors.New("sysfs gone") }}, 0)
	_, err = c.Probe(t.Context())
	wantErr(t, err, "probe: sysfs gone")
}

func TestStart(t *testing.T) {
	cfg := sdk.StartConfig{Engine: "e1", Incarnation: 77, MachineID: "m", Config: []byte(`listen = ["x"]`),
		ConfigFile: "ferry.hcl", ConfigLine: 12, ConfigColumn: 3, ConfigByte: 200}
	var got sdk.StartConfig
	c := plugintest.Connect(t, &plugintest.Mock{StartFunc: func(_ context.Context, sc sdk.StartConfig) (sdk.Endpoint, error) {
		got = sc
		if sc.Engine == "bad" {
			return nil, errors.New("listen: address in use")
		}
		return sdk.Endpoint("ep-blob"), nil
	}}, 0)
	_, err := c.Start(t.Context(), sdk.StartConfig{Engine: "bad"})
	wantErr(t, err, "start: listen: address in use", "InvalidArgument")
	// A failed Start may be retried.
	ep, err := c.Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if string(ep) != "ep-blob" || !reflect.DeepEqual(got, cfg) {
		t.Fatalf("start got %+v, endpoint %q; want %+v, ep-blob", got, ep, cfg)
	}
	_, err = c.Start(t.Context(), cfg)
	wantErr(t, err, "already started", "FailedPrecondition")
}

func TestMemory(t *testing.T) {
	var mu sync.Mutex
	regions := map[uint32]sdk.Region{}
	var unregistered []uint32
	m := &plugintest.Mock{
		RegisterMemoryFunc: func(_ context.Context, r sdk.Region) error {
			if r.ID == 9 {
				return errors.New("region 9 refused")
			}
			mu.Lock()
			defer mu.Unlock()
			regions[r.ID] = r
			return nil
		},
		UnregisterMemoryFunc: func(_ context.Context, id uint32) error {
			mu.Lock()
			defer mu.Unlock()
			unregistered = append(unregistered, id)
			return nil
		},
	}
	c := plugintest.Connect(t, m, 0)
	r, err := shm.Create("contract", 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i := range r.Mem() {
		r.Mem()[i] = byte(i * 7)
	}
	perms := map[uint32]sdk.Perm{1: sdk.PermLocal, 2: sdk.PermRemoteRead, 3: sdk.PermRemoteReadWrite}
	for id, perm := range perms {
		if err := c.RegisterMemory(t.Context(), id, r.FD(), 4096, 8192, perm, "cpu"); err != nil {
			t.Fatalf("register %d: %v", id, err)
		}
	}
	for id, perm := range perms {
		got := regions[id]
		if got.Perm != perm || got.Kind != "cpu" || len(got.Mem) != 8192 || got.FD <= 0 || got.FDOffset != 4096 {
			t.Errorf("region %d arrived as perm %v kind %q len %d fd %d offset %d", id, got.Perm, got.Kind, len(got.Mem), got.FD, got.FDOffset)
		}
		if !bytes.Equal(got.Mem, r.Mem()[4096:4096+8192]) {
			t.Errorf("region %d does not map the bytes the host wrote", id)
		}
	}
	// The mapping is shared: a plugin's write is the host's memory.
	regions[3].Mem[0] = 0xee
	if r.Mem()[4096] != 0xee {
		t.Error("a write through the plugin's mapping did not reach the host's region")
	}
	wantErr(t, c.RegisterMemory(t.Context(), 1, r.FD(), 0, 4096, sdk.PermLocal, "cpu"), "region 1 already registered", "AlreadyExists")
	wantErr(t, c.RegisterMemory(t.Context(), 9, r.FD(), 0, 4096, sdk.PermLocal, "cpu"), "register region 9: region 9 refused")
	wantErr(t, c.RegisterMemory(t.Context(), 8, r.FD(), 0, 4096, 0, "cpu"), "register region 8", "unknown permission")
	wantErr(t, c.RegisterMemory(t.Context(), 7, r.FD(), 0, 0, sdk.PermLocal, "cpu"), "bad range")

	if err := c.UnregisterMemory(t.Context(), 2); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(unregistered, []uint32{2}) {
		t.Fatalf("unregistered %v, want [2]", unregistered)
	}
	wantErr(t, c.UnregisterMemory(t.Context(), 2), "region 2 is not registered", "NotFound")
}

func TestNoFDSocket(t *testing.T) {
	c := pluginclient.New(nil, nil)
	wantErr(t, c.RegisterMemory(t.Context(), 1, 0, 0, 1, sdk.PermLocal, "cpu"), "no fd socket")
	_, err := c.AttachLane(t.Context(), 0, 1, nil, nil, pluginclient.LaneTiming{})
	wantErr(t, err, "no fd socket")
}

func TestPeers(t *testing.T) {
	var opened []sdk.Peer
	var closed []uint32
	c := plugintest.Connect(t, &plugintest.Mock{
		OpenPeerFunc: func(_ context.Context, p sdk.Peer) error {
			if p.Segment == "unreachable" {
				return errors.New("connection refused")
			}
			opened = append(opened, p)
			return nil
		},
		ClosePeerFunc: func(_ context.Context, id uint32) error {
			if id == 5 {
				return errors.New("no such peer")
			}
			closed = append(closed, id)
			return nil
		},
	}, 0)
	p := sdk.Peer{ID: 3, Segment: "decode-0", Incarnation: 1 << 40, MachineID: "m2", Endpoint: sdk.Endpoint{1, 2, 3}}
	if err := c.OpenPeer(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(opened, []sdk.Peer{p}) {
		t.Fatalf("opened %+v, want %+v", opened, p)
	}
	wantErr(t, c.OpenPeer(t.Context(), sdk.Peer{ID: 4, Segment: "unreachable"}), `open peer "unreachable": connection refused`, "Unavailable")
	if err := c.ClosePeer(t.Context(), 3); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(closed, []uint32{3}) {
		t.Fatalf("closed %v, want [3]", closed)
	}
	wantErr(t, c.ClosePeer(t.Context(), 5), "close peer 5: no such peer", "NotFound")
}

func TestStatsAndStop(t *testing.T) {
	stopped := 0
	m := &plugintest.Mock{
		StatsFunc: func(context.Context) (map[string]uint64, error) {
			return map[string]uint64{"frames": 12, "bytes": 1 << 33}, nil
		},
		StopFunc: func(context.Context) error { stopped++; return errors.New("flush failed") },
	}
	c := plugintest.Connect(t, m, 0)
	s, err := c.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s, map[string]uint64{"frames": 12, "bytes": 1 << 33}) {
		t.Fatalf("stats %v", s)
	}
	wantErr(t, c.Stop(t.Context()), "stop: flush failed", "Internal")
	if stopped != 1 {
		t.Fatalf("Stop reached the transport %d times, want 1", stopped)
	}
	failing := &plugintest.Mock{StatsFunc: func(context.Context) (map[string]uint64, error) { return nil, errors.New("counters locked") }}
	_, err = plugintest.Connect(t, failing, 0).Stats(t.Context())
	wantErr(t, err, "stats: counters locked")
}

func TestDrain(t *testing.T) {
	drained := 0
	d := &plugintest.MockDrainer{DrainFunc: func(ctx context.Context) error {
		drained++
		if drained == 2 {
			return context.DeadlineExceeded
		}
		return nil
	}}
	c := plugintest.Connect(t, d, 0)
	if err := c.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	err := c.Drain(t.Context())
	wantErr(t, err, "drain", "DeadlineExceeded")
	if errors.Is(err, pluginclient.ErrUnimplemented) {
		t.Fatal("a drainer's failure reads as unimplemented")
	}
	if drained != 2 {
		t.Fatalf("Drain reached the transport %d times, want 2", drained)
	}
}

// A transport without the optional interface answers Unimplemented, which
// the client names; so does a server that predates the RPC.
func TestDrainUnimplemented(t *testing.T) {
	for _, protocol := range []int{1, 2} {
		c := plugintest.Connect(t, &plugintest.Mock{}, protocol)
		if _, err := c.Describe(t.Context()); err != nil {
			t.Fatal(err)
		}
		err := c.Drain(t.Context())
		if !errors.Is(err, pluginclient.ErrUnimplemented) {
			t.Fatalf("protocol %d: Drain on a plugin without it: %v, want ErrUnimplemented", protocol, err)
		}
		var ue *pluginclient.UnimplementedError
		if !errors.As(err, &ue) || ue.Plugin != "mock" || ue.Method != "Drain" {
			t.Fatalf("protocol %d: %#v, want an *UnimplementedError for mock's Drain", protocol, err)
		}
		wantErr(t, err, `plugin "mock" does not implement Drain; needs SDK >= protocol 2`)
	}
}

// A lane carries descriptors to Submit and completions back, with the
// generation stamped, through the same server a plugin process runs.
func TestLane(t *testing.T) {
	var mu sync.Mutex
	var seen []ring.Descriptor
	m := &plugintest.Mock{SubmitFunc: func(d *ring.Descriptor, c sdk.Completer) {
		mu.Lock()
		seen = append(seen, *d)
		mu.Unlock()
		st := ring.StatusOK
		if d.Length > 1000 {
			st = ring.StatusInvalid
		}
		c.Complete(d.Token, st, d.Length/2)
	}}
	c := plugintest.Connect(t, m, 0)
	const depth = 64
	sqr, err := shm.Create("contract-sq", ring.Size(depth))
	if err != nil {
		t.Fatal(err)
	}
	defer sqr.Close()
	cqr, err := shm.Create("contract-cq", ring.Size(depth))
	if err != nil {
		t.Fatal(err)
	}
	defer cqr.Close()
	sq, err := ring.Init(sqr.Mem(), depth)
	if err != nil {
		t.Fatal(err)
	}
	cq, err := ring.Init(cqr.Mem(), depth)
	if err != nil {
		t.Fatal(err)
	}
	gen, err := c.AttachLane(t.Context(), 0, 7, sqr, cqr, pluginclient.LaneTiming{Spin: 10 * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	if gen != 7 {
		t.Fatalf("lane stamps generation %d, want 7", gen)
	}
	_, err = c.AttachLane(t.Context(), 0, 7, sqr, cqr, pluginclient.LaneTiming{})
	wantErr(t, err, "lane 0 already attached", "AlreadyExists")

	in := []ring.Descriptor{
		{Token: 1, Op: ring.OpWrite, LocalRegion: 1, LocalOffset: 8, Peer: 2, RemoteRegion: 3, RemoteOffset: 16, Length: 100},
		{Token: 2, Op: ring.OpRead, LocalRegion: 4, Peer: 5, RemoteRegion: 6, Length: 5000},
	}
	for i := range in {
		if !sq.Enqueue(&in[i]) {
			t.Fatal("submission ring full")
		}
	}
	sq.Publish()
	got := map[uint64]ring.Descriptor{}
	buf := make([]ring.Descriptor, 8)
	deadline := time.Now().Add(30 * time.Second)
	for len(got) < len(in) && time.Now().Before(deadline) {
		n := cq.Dequeue(buf)
		for _, d := range buf[:n] {
			got[d.Token] = d
		}
		if n == 0 {
			cq.Wait(10*time.Microsecond, 10*time.Millisecond)
		}
	}
	if len(got) != len(in) {
		t.Fatalf("%d of %d completions arrived", len(got), len(in))
	}
	if g := got[1]; g.Op != ring.OpCompletion || g.Status != ring.StatusOK || g.Length != 50 || g.Flags != 7 {
		t.Errorf("completion 1: %+v", g)
	}
	if g := got[2]; g.Status != ring.StatusInvalid || g.Length != 2500 || g.Flags != 7 {
		t.Errorf("completion 2: %+v", g)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 {
		t.Fatalf("Submit saw %d descriptors, want 2", len(seen))
	}
	for i, d := range seen {
		if d.Token != in[i].Token || d.Op != in[i].Op || d.LocalRegion != in[i].LocalRegion || d.LocalOffset != in[i].LocalOffset ||
			d.Peer != in[i].Peer || d.RemoteRegion != in[i].RemoteRegion || d.RemoteOffset != in[i].RemoteOffset || d.Length != in[i].Length {
			t.Errorf("Submit saw %+v, want %+v", d, in[i])
		}
	}
}

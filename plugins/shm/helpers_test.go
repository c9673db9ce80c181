package shm_test

import (
	"context"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/ferrydev/ferry/plugins/shm"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
	sdkshm "github.com/ferrydev/ferry/sdk/shm"
)

// helperEnv makes the test binary act as a dialing plugin (see
// TestPeerCredRefused) instead of running the tests.
const helperEnv = "FERRY_SHM_TEST_DIALER"

func TestMain(m *testing.M) {
	if ep := os.Getenv(helperEnv); ep != "" {
		os.Exit(dialerHelper(ep))
	}
	goleak.VerifyTestMain(m)
}

const machine = "test-machine"

// engine is one Transport in this process with its endpoint.
type engine struct {
	tr          *shm.Transport
	name        string
	incarnation uint64
	ep          sdk.Endpoint
	col         *plugintest.Collector
	next        uint64
}

func startEngine(t testing.TB, name string, incarnation uint64, config string) *engine {
	t.Helper()
	return startEngineOn(t, machine, name, incarnation, config)
}

// startEngineOn starts an engine whose host passes machineID ("": none).
func startEngineOn(t testing.TB, machineID, name string, incarnation uint64, config string) *engine {
	t.Helper()
	tr := shm.New(shm.WithLogger(hclog.NewNullLogger()))
	ep, err := tr.Start(context.Background(), sdk.StartConfig{
		Engine: name, Incarnation: incarnation, MachineID: machineID, Config: []byte(config), ConfigFile: "test.hcl", ConfigLine: 1, ConfigColumn: 1,
	})
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := tr.Stop(context.Background()); err != nil {
			t.Errorf("stop %s: %v", name, err)
		}
	})
	return &engine{tr: tr, name: name, incarnation: incarnation, ep: ep, col: plugintest.NewCollector(t)}
}

// region creates a sealed memfd region of size bytes, as the host does,
// and registers it as id.
func (e *engine) region(t testing.TB, id uint32, size int, perm sdk.Perm, label string) []byte {
	t.Helper()
	r, err := sdkshm.Create(label, size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if err := e.tr.RegisterMemory(context.Background(), sdk.Region{ID: id, Mem: r.Mem(), Perm: perm, Kind: "cpu", FD: r.FD()}); err != nil {
		t.Fatalf("register %d: %v", id, err)
	}
	return r.Mem()
}

func (e *engine) open(t testing.TB, id uint32, target *engine) {
	t.Helper()
	err := e.tr.OpenPeer(context.Background(), sdk.Peer{ID: id, Segment: target.name, Incarnation: target.incarnation, MachineID: machine, Endpoint: target.ep})
	if err != nil {
		t.Fatalf("open peer %d: %v", id, err)
	}
}

// writePair starts engine a (with config) and engine b, registers a
// local region 1 of size bytes on a and a remote read-write region 1 of
// size bytes on b, and opens b as a's peer 1. It returns a and both
// regions' memory.
func writePair(t testing.TB, config string, size int) (a *engine, local, rw []byte) {
	t.Helper()
	a = startEngine(t, "a", 1, config)
	b := startEngine(t, "b", 2, "")
	local = a.region(t, 1, size, sdk.PermLocal, "a-local")
	rw = b.region(t, 1, size, sdk.PermRemoteReadWrite, "b-rw")
	a.open(t, 1, b)
	return a, local, rw
}

// do submits d and waits for its completion.
func (e *engine) do(t testing.TB, d ring.Descriptor) plugintest.Completion {
	t.Helper()
	e.next++
	d.Token = e.next
	e.tr.Submit(&d, e.col)
	return e.col.Wait(d.Token)
}

func (e *engine) stats(t testing.TB) map[string]uint64 {
	t.Helper()
	m, err := e.tr.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for k := range 8 {
			b[i+k] = byte(v >> (8 * k))
		}
	}
}

// pluginBinary builds ferry-plugin-shm into a temporary directory.
func pluginBinary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and launches the plugin binary")
	}
	return plugintest.BuildPlugin(t, "github.com/ferrydev/ferry/plugins/shm/cmd/ferry-plugin-shm")
}

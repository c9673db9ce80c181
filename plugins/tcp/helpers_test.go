package tcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/ferrydev/ferry/plugins/tcp"
	"github.com/ferrydev/ferry/sdk"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitLimit is a safety net against a hang, never a synchronisation point.
const waitLimit = 60 * time.Second

// engine is one Transport with its endpoint.
type engine struct {
	tr          *tcp.Transport
	name        string
	incarnation uint64
	ep          sdk.Endpoint
}

func startEngine(t testing.TB, name string, incarnation uint64, config string) *engine {
	t.Helper()
	return startWithLogger(t, name, incarnation, config, hclog.NewNullLogger())
}

func startWithLogger(t testing.TB, name string, incarnation uint64, config string, log hclog.Logger) *engine {
	t.Helper()
	tr := tcp.New(tcp.WithLogger(log))
	ep, err := tr.Start(context.Background(), sdk.StartConfig{
		Engine: name, Incarnation: incarnation, Config: []byte(config), ConfigFile: "test.hcl", ConfigLine: 1, ConfigColumn: 1,
	})
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := tr.Stop(context.Background()); err != nil {
			t.Errorf("stop %s: %v", name, err)
		}
	})
	return &engine{tr: tr, name: name, incarnation: incarnation, ep: ep}
}

func (e *engine) register(t testing.TB, id uint32, mem []byte, perm sdk.Perm) {
	t.Helper()
	if err := e.tr.RegisterMemory(context.Background(), sdk.Region{ID: id, Mem: mem, Perm: perm, Kind: "cpu"}); err != nil {
		t.Fatalf("register %d: %v", id, err)
	}
}

// open makes peer id on e point at target.
func (e *engine) open(t testing.TB, id uint32, target *engine) {
	t.Helper()
	err := e.tr.OpenPeer(context.Background(), sdk.Peer{ID: id, Segment: target.name, Incarnation: target.incarnation, Endpoint: target.ep})
	if err != nil {
		t.Fatalf("open peer %d: %v", id, err)
	}
}

func (e *engine) stat(t testing.TB, name string) uint64 {
	t.Helper()
	m, err := e.tr.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	v, ok := m[name]
	if !ok {
		t.Fatalf("no counter %q", name)
	}
	return v
}

// fill writes a seeded pseudo-random pattern into b. The pattern repeats
// with a prime period, so a shifted copy never matches.
func fill(b []byte, seed uint64) {
	const period = 4093
	var block [period]byte
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := range block {
		block[i] = byte(r.Uint32())
	}
	for off := 0; off < len(b); off += period {
		copy(b[off:], block[:])
	}
}

func snapshot(b []byte) []byte { return bytes.Clone(b) }

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

package shm_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/kit"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
)

// endpointMachine is the machine id an endpoint blob publishes.
func endpointMachine(t *testing.T, ep sdk.Endpoint) string {
	t.Helper()
	var e struct {
		Machine string `json:"machine"`
	}
	if err := json.Unmarshal(ep, &e); err != nil {
		t.Fatalf("endpoint %q: %v", ep, err)
	}
	return e.Machine
}

// The endpoint publishes the machine id the host passed, never the raw
// /etc/machine-id (which config hashes on purpose).
func TestEndpointPublishesHostMachineID(t *testing.T) {
	e := startEngine(t, "a", 1, "")
	if got := endpointMachine(t, e.ep); got != machine {
		t.Fatalf("endpoint machine %q, want the host's %q", got, machine)
	}
}

// Started without a machine id (driven directly, not by a host), the
// plugin publishes a hash of this machine's id, not the raw one, and two
// such engines still find each other on the same machine.
func TestEndpointWithoutHostMachineID(t *testing.T) {
	a, b := startEngineOn(t, "", "a", 1, ""), startEngineOn(t, "", "b", 2, "")
	got := endpointMachine(t, a.ep)
	if want := kit.MachineID(sdk.StartConfig{}); got != want || got == "" {
		t.Fatalf("endpoint machine %q, want %q", got, want)
	}
	for _, f := range []string{"/etc/machine-id", "/var/lib/dbus/machine-id"} {
		if raw, err := os.ReadFile(f); err == nil {
			if id := strings.TrimSpace(string(raw)); id != "" && strings.Contains(string(a.ep), id) {
				t.Fatalf("the endpoint %s publishes the raw id from %s", a.ep, f)
			}
		}
	}
	local := a.region(t, 1, 4096, sdk.PermLocal, "a-local")
	rw := b.region(t, 1, 4096, sdk.PermRemoteReadWrite, "b-rw")
	err := a.tr.OpenPeer(context.Background(), sdk.Peer{ID: 1, Segment: "b", Incarnation: 2, MachineID: endpointMachine(t, b.ep), Endpoint: b.ep})
	if err != nil {
		t.Fatalf("open a peer on the same machine: %v", err)
	}
	fill(local, 3)
	if c := a.do(t, ring.Descriptor{Op: ring.OpWrite, LocalRegion: 1, Peer: 1, RemoteRegion: 1, Length: 4096}); c.Status != ring.StatusOK {
		t.Fatalf("write: %v", c.Status)
	}
	plugintest.MustEqual(t, "write", rw, local)
}

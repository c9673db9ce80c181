package shm_test

import (
	"context"
	"encoding/json"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/internal/pluginclient"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
	sdkshm "github.com/ferrydev/ferry/sdk/shm"
)

// startVictim launches the plugin bin and starts it with cfg, and creates
// the 1 MiB region "victim-region" for it to serve; both end with the
// test. It returns the plugin, the endpoint Start returned, its socket and
// the region.
func startVictim(t *testing.T, ctx context.Context, bin string, cfg sdk.StartConfig) (*pluginclient.Process, []byte, string, *sdkshm.Region) {
	t.Helper()
	p, err := pluginclient.Launch(ctx, bin, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	epb, err := p.Client.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var ep struct{ Socket string }
	if err := json.Unmarshal(epb, &ep); err != nil {
		t.Fatal(err)
	}
	r, err := sdkshm.Create("victim-region", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return p, epb, ep.Socket, r
}

// TestAcceptSurvivesFDExhaustion runs the plugin binary under an open
// files limit of 64 (prlimit, as `ulimit -n 64` would) and opens
// connections to it until its accept fails: once they close, a real peer
// still connects and reads, and the plugin reports accepting.
func TestAcceptSurvivesFDExhaustion(t *testing.T) {
	bin := pluginBinary(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	p, epb, socket, r := startVictim(t, ctx, bin, sdk.StartConfig{Engine: "victim", Incarnation: 3, MachineID: machine, Config: []byte("max_conns = 100000"), ConfigFile: "t.hcl", ConfigLine: 1, ConfigColumn: 1})
	fill(r.Mem(), 11)
	if err := p.Client.RegisterMemory(ctx, 1, r.FD(), 0, 1<<20, sdk.PermRemoteRead, "cpu"); err != nil {
		t.Fatal(err)
	}
	lim := unix.Rlimit{Cur: 64, Max: 64}
	if err := unix.Prlimit(p.PID(), unix.RLIMIT_NOFILE, &lim, nil); err != nil {
		t.Fatalf("prlimit the plugin to 64 open files: %v", err)
	}
	// Pressure: connections that never say hello, until the plugin's
	// accept has failed (each accepted one holds a descriptor there).
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for errs := uint64(0); errs == 0; {
		if len(held) == 2000 {
			t.Fatalf("2000 connections open and the plugin's accept never failed")
		}
		c, err := net.Dial("unixpacket", socket)
		if err != nil {
			t.Fatalf("dial under pressure: %v", err)
		}
		held = append(held, c)
		st, err := p.Client.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		errs = st["accept_errors"]
	}
	t.Logf("the plugin's accept failed after %d connections", len(held))
	for _, c := range held {
		c.Close()
	}
	held = nil
	// The pressure is over once the plugin has seen them end.
	for deadline := time.Now().Add(time.Minute); ; {
		st, err := p.Client.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st["conns_open"] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the plugin still holds %d connections a minute after they closed", st["conns_open"])
		}
		time.Sleep(time.Millisecond)
	}
	// A real peer connects and reads.
	a := startEngine(t, "a", 1, "")
	local := a.region(t, 1, 1<<20, sdk.PermLocal, "a-local")
	a.open(t, 1, &engine{name: "victim", incarnation: 3, ep: epb})
	if c := a.do(t, ring.Descriptor{Op: ring.OpRead, LocalRegion: 1, Peer: 1, RemoteRegion: 1, Length: 1 << 20}); c.Status != ring.StatusOK {
		t.Fatalf("read after the descriptor pressure ended: %v", c.Status)
	}
	if string(local) != string(r.Mem()) {
		t.Fatal("read after the descriptor pressure ended: wrong bytes")
	}
	st, err := p.Client.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st["accepting"] != 1 || st["accept_errors"] == 0 {
		t.Fatalf("accepting %d accept_errors %d; want 1 and more than 0", st["accepting"], st["accept_errors"])
	}
}

// TestMaxConns: a connection beyond max_conns is closed at once; when the
// others end, peers connect again.
func TestMaxConns(t *testing.T) {
	b := startEngine(t, "b", 2, "max_conns = 2")
	rw := b.region(t, 1, 1<<20, sdk.PermRemoteReadWrite, "b-rw")
	fill(rw, 3)
	var ep struct{ Socket string }
	if err := json.Unmarshal(b.ep, &ep); err != nil {
		t.Fatal(err)
	}
	var held []*net.UnixConn
	for range 3 {
		c, err := net.Dial("unixpacket", ep.Socket)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c.(*net.UnixConn))
	}
	// The third is closed without an answer: its read ends.
	held[2].SetReadDeadline(time.Now().Add(time.Minute))
	if n, err := held[2].Read(make([]byte, 64)); err == nil && n > 0 {
		t.Fatalf("the connection beyond max_conns got %d bytes", n)
	}
	if st := b.stats(t); st["conns_refused"] != 1 {
		t.Fatalf("conns_refused %d, want 1", st["conns_refused"])
	}
	for _, c := range held {
		c.Close()
	}
	// Wait until the server has seen them end (its slots are free).
	for deadline := time.Now().Add(time.Minute); b.stats(t)["conns_open"] != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the server still holds %d connections a minute after they closed", b.stats(t)["conns_open"])
		}
		time.Sleep(time.Millisecond)
	}
	a := startEngine(t, "a", 1, "")
	a.region(t, 1, 1<<20, sdk.PermLocal, "a-local")
	a.open(t, 1, b)
	if c := a.do(t, ring.Descriptor{Op: ring.OpRead, LocalRegion: 1, Peer: 1, RemoteRegion: 1, Length: 4096}); c.Status != ring.StatusOK {
		t.Fatalf("read once the held connections closed: %v", c.Status)
	}
}

package tcp

import (
	"context"
	"net"
	"testing"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
)

// sockBuf reads nc's SO_SNDBUF or SO_RCVBUF (opt).
func sockBuf(t *testing.T, nc net.Conn, opt int) int {
	t.Helper()
	rc, err := nc.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, opt) }); err != nil {
		t.Fatal(err)
	}
	if gerr != nil {
		t.Fatal(gerr)
	}
	return v
}

func startInternal(t *testing.T, name string, inc uint64, cfg string) (*Transport, sdk.Endpoint) {
	t.Helper()
	tr := New(WithLogger(hclog.NewNullLogger()))
	ep, err := tr.Start(context.Background(), sdk.StartConfig{Engine: name, Incarnation: inc, Config: []byte(cfg), ConfigFile: "test.hcl", ConfigLine: 1, ConfigColumn: 1})
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := tr.Stop(context.Background()); err != nil {
			t.Errorf("stop %s: %v", name, err)
		}
	})
	return tr, ep
}

// TestBulkBuffer: with bulk_buffer set, the dialer's bulk connection and
// the connection the listener served a bulk frame on have that send and
// receive buffer (Linux reports twice what was set), while the priority
// connection keeps the kernel's sizing; without it the bulk connection
// keeps the kernel's sizing too.
func TestBulkBuffer(t *testing.T) {
	const set = 48 << 10 // reported as 96KiB: no default size of the kernel's
	for _, c := range []struct {
		config string
		want   bool
	}{
		{`bulk_buffer = "48KiB"`, true},
		{``, false},
	} {
		t.Run(c.config, func(t *testing.T) {
			cfg := "connections_per_peer = 1\n" + c.config
			a, _ := startInternal(t, "engine-a", 100, cfg)
			b, bep := startInternal(t, "engine-b", 200, cfg)
			const n = 2 << 20 // a bulk frame (bulkFrame) for the listener
			if err := a.RegisterMemory(context.Background(), sdk.Region{ID: 1, Mem: make([]byte, n), Perm: sdk.PermLocal, Kind: "cpu"}); err != nil {
				t.Fatal(err)
			}
			if err := b.RegisterMemory(context.Background(), sdk.Region{ID: 1, Mem: make([]byte, n), Perm: sdk.PermRemoteReadWrite, Kind: "cpu"}); err != nil {
				t.Fatal(err)
			}
			if err := a.OpenPeer(context.Background(), sdk.Peer{ID: 1, Segment: "engine-b", Incarnation: 200, Endpoint: bep}); err != nil {
				t.Fatal(err)
			}
			col := plugintest.NewCollector(t)
			a.Submit(&ring.Descriptor{Token: 1, Op: ring.OpWrite, Prio: uint8(sdk.PriorityLow), Peer: 1, LocalRegion: 1, RemoteRegion: 1, Length: n}, col)
			a.Submit(&ring.Descriptor{Token: 2, Op: ring.OpRead, Prio: uint8(sdk.PriorityHigh), Peer: 1, LocalRegion: 1, RemoteRegion: 1, Length: 4096}, col)
			for tok := uint64(1); tok <= 2; tok++ {
				if got := col.Wait(tok); got.Status != ring.StatusOK {
					t.Fatalf("token %d: %v", tok, got.Status)
				}
			}
			p := a.base.Peers.List()[0]
			conn := func(s *slot) net.Conn {
				s.mu.Lock()
				defer s.mu.Unlock()
				if s.cur == nil {
					t.Fatal("the slot has no connection")
				}
				return s.cur.link.nc
			}
			bulk, prio := conn(p.slots[0]), conn(p.slots[1])
			is := func(nc net.Conn) bool {
				return sockBuf(t, nc, unix.SO_SNDBUF) == 2*set && sockBuf(t, nc, unix.SO_RCVBUF) == 2*set
			}
			if got := is(bulk); got != c.want {
				t.Errorf("the dialer's bulk connection has buffers of %d and %d bytes; set to bulk_buffer: %v, want %v",
					sockBuf(t, bulk, unix.SO_SNDBUF), sockBuf(t, bulk, unix.SO_RCVBUF), got, c.want)
			}
			if is(prio) {
				t.Errorf("the dialer's priority connection has bulk_buffer's buffers")
			}
			b.mu.Lock()
			served := 0
			for sc := range b.servers {
				if is(sc.link.nc) {
					served++
				}
			}
			total := len(b.servers)
			b.mu.Unlock()
			if want := map[bool]int{true: 1, false: 0}[c.want]; served != want || total != 2 {
				t.Errorf("the listener has %d of %d connections with bulk_buffer's buffers, want %d of 2 (the bulk one)", served, total, want)
			}
		})
	}
}

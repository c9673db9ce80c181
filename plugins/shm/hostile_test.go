package shm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"testing"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/kit/samehost"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
)

// offer is what a hostile peer plugin answers a region query with.
type offer struct {
	fileSize int64 // the memfd it sends, sealed
	populate bool  // write the file's bytes (else it stays sparse)
	off      uint64
	length   uint64 // the length the answer claims
}

// hostilePeer serves one connection on a fresh abstract socket: it
// accepts the hello of segment "evil" incarnation 5 and answers every
// region query with o. It returns the endpoint to open.
func hostilePeer(t *testing.T, o offer) sdk.Endpoint {
	t.Helper()
	var rnd [8]byte
	rand.Read(rnd[:])
	name := "@ferry-shm-test/" + hex.EncodeToString(rnd[:])
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: name, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.MemfdCreate("hostile", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, o.fileSize); err != nil {
		t.Fatal(err)
	}
	if o.populate {
		if _, err := unix.Pwrite(fd, make([]byte, o.fileSize), 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		ln.Close()
		<-done
		unix.Close(fd)
	})
	go func() {
		defer close(done)
		c, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		defer c.Close()
		cn := samehost.NewConn(c, codec{})
		rd := samehost.NewReader(codec{})
		if _, _, err := rd.Read(c); err != nil {
			return
		}
		if cn.Send(msg{Type: msgHelloAck, Status: ring.StatusOK, Inc: 5}, -1) != nil {
			return
		}
		for {
			q, _, err := rd.Read(c)
			if err != nil {
				return
			}
			if q.Type != msgQuery {
				continue
			}
			if cn.Send(msg{Type: msgRegion, Region: q.Region, Status: ring.StatusOK, Perm: sdk.PermRemoteReadWrite,
				Gen: 1, Off: o.off, Length: o.length}, fd) != nil {
				return
			}
		}
	}()
	return samehost.Endpoint{V: EndpointVersion, Socket: name, Machine: "m"}.Encode()
}

// TestHostileOffersRefusedBeforeMapping: a peer plugin that offers a file
// other than exactly the region, a sparse one, or more than
// max_mapped_bytes gets nothing mapped, and the write fails.
func TestHostileOffersRefusedBeforeMapping(t *testing.T) {
	const k64 = 64 << 10
	cases := []struct {
		name   string
		config string
		o      offer
		want   ring.Status
	}{
		// The attack: a sparse 4 GiB memfd for a 64 KiB buffer.
		{"sparse 4 GiB file for a 64 KiB region", "", offer{fileSize: 4 << 30, length: k64}, ring.StatusProtocol},
		{"sparse 4 GiB file, answer says 4 GiB", "", offer{fileSize: 4 << 30, length: 4 << 30}, ring.StatusProtocol},
		{"region at an offset of a larger file", "", offer{fileSize: 2 * k64, populate: true, off: k64, length: k64}, ring.StatusProtocol},
		{"more than max_mapped_bytes", `max_mapped_bytes = "512KiB"`, offer{fileSize: 1 << 20, populate: true, length: 1 << 20}, ring.StatusUnsupported},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			tr := New(WithLogger(hclog.NewNullLogger()))
			if _, err := tr.Start(ctx, sdk.StartConfig{Engine: "victim", Incarnation: 1, MachineID: "m", Config: []byte(c.config), ConfigFile: "t.hcl", ConfigLine: 1, ConfigColumn: 1}); err != nil {
				t.Fatal(err)
			}
			defer tr.Stop(ctx)
			if err := tr.RegisterMemory(ctx, sdk.Region{ID: 1, Mem: make([]byte, k64), Perm: sdk.PermLocal, FD: -1}); err != nil {
				t.Fatal(err)
			}
			if err := tr.OpenPeer(ctx, sdk.Peer{ID: 1, Segment: "evil", Incarnation: 5, MachineID: "m", Endpoint: hostilePeer(t, c.o)}); err != nil {
				t.Fatal(err)
			}
			col := plugintest.NewCollector(t)
			tr.Submit(&ring.Descriptor{Token: 1, Op: ring.OpWrite, LocalRegion: 1, Peer: 1, RemoteRegion: 1, Length: 4096}, col)
			if got := col.Wait(1); got.Status != c.want {
				t.Fatalf("write to the offered region: %v, want %v", got.Status, c.want)
			}
			st, _ := tr.Stats(ctx)
			if st["maps_created"] != 0 || st["mapped_bytes"] != 0 || st["offers_refused"] != 1 {
				t.Fatalf("maps_created %d mapped_bytes %d offers_refused %d; want 0, 0, 1", st["maps_created"], st["mapped_bytes"], st["offers_refused"])
			}
		})
	}
}

// TestMappedBytesBound: mapped_bytes counts what is mapped and returns to
// zero when the peer is closed, so that the bound frees up.
func TestMappedBytesBound(t *testing.T) {
	ctx := context.Background()
	tr := New(WithLogger(hclog.NewNullLogger()))
	if _, err := tr.Start(ctx, sdk.StartConfig{Engine: "v", Incarnation: 1, MachineID: "m", Config: []byte(`max_mapped_bytes = "1MiB"`), ConfigFile: "t.hcl", ConfigLine: 1, ConfigColumn: 1}); err != nil {
		t.Fatal(err)
	}
	defer tr.Stop(ctx)
	if err := tr.RegisterMemory(ctx, sdk.Region{ID: 1, Mem: make([]byte, 4096), Perm: sdk.PermLocal, FD: -1}); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		if err := tr.OpenPeer(ctx, sdk.Peer{ID: 1, Segment: "evil", Incarnation: 5, MachineID: "m",
			Endpoint: hostilePeer(t, offer{fileSize: 1 << 20, populate: true, length: 1 << 20})}); err != nil {
			t.Fatal(err)
		}
		col := plugintest.NewCollector(t)
		tr.Submit(&ring.Descriptor{Token: 1, Op: ring.OpWrite, LocalRegion: 1, Peer: 1, RemoteRegion: 1, Length: 4096}, col)
		if got := col.Wait(1); got.Status != ring.StatusOK {
			t.Fatalf("round %d: write within max_mapped_bytes: %v", round, got.Status)
		}
		if st, _ := tr.Stats(ctx); st["mapped_bytes"] != 1<<20 {
			t.Fatalf("round %d: mapped_bytes %d, want %d", round, st["mapped_bytes"], 1<<20)
		}
		if err := tr.ClosePeer(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if st, _ := tr.Stats(ctx); st["mapped_bytes"] != 0 {
			t.Fatalf("round %d: mapped_bytes %d after ClosePeer, want 0", round, st["mapped_bytes"])
		}
	}
}

// TestAcceptLoopDeathIsReported: a listener closed under the plugin (not
// by Stop) calls the fatal hook, which the plugin binary turns into an
// exit, and Stats reports accepting 0.
func TestAcceptLoopDeathIsReported(t *testing.T) {
	ctx := context.Background()
	died := make(chan error, 1)
	tr := New(WithLogger(hclog.NewNullLogger()), WithFatal(func(err error) { died <- err }))
	if _, err := tr.Start(ctx, sdk.StartConfig{Engine: "v", Incarnation: 1, MachineID: "m"}); err != nil {
		t.Fatal(err)
	}
	defer tr.Stop(ctx)
	if st, _ := tr.Stats(ctx); st["accepting"] != 1 {
		t.Fatalf("accepting %d while the loop runs, want 1", st["accepting"])
	}
	tr.srv.CloseListener()
	if err := <-died; err == nil {
		t.Fatal("fatal hook called with nil")
	}
	if st, _ := tr.Stats(ctx); st["accepting"] != 0 {
		t.Fatalf("accepting %d after the loop ended, want 0", st["accepting"])
	}
}

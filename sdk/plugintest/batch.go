package plugintest

import (
	"bytes"
	"context"
	"fmt"

	"github.com/ferrydev/ferry/internal/pluginclient"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
	"github.com/ferrydev/ferry/sdk/shm"
)

// batchRegistration registers 260 regions on b in one batch, as a host
// registers a KV cache's blocks: 130 remotely writable regions, each a
// memfd of exactly its bytes (a host gives a region peers may use a file
// of its own), and 130 local-only ones, two pages of each of 65 memfds
// (regions of one file share its fd in the batch). A plugin whose SDK
// takes batches gets one call, any other one call per region. a then
// writes into some of the remote ones and reads them back, is refused a
// write into a local-only one, and once the batch is unregistered a write
// to one of them finds no region.
func batchRegistration(t TB, a, b *Instance, local []byte) {
	const remote, first = 130, 1000
	// Describe tells the client whether the plugin takes batches.
	d, err := b.proc.Client.Describe(context.Background())
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Logf("the plugin takes batches: %v", d.RegisterBatch)
	var regs []pluginclient.Region
	mems := make([][]byte, 0, remote)
	for i := range remote {
		r, err := shm.Create(fmt.Sprintf("%s-batch%d", b.name, i), 4096)
		if err != nil {
			t.Fatalf("%v", err)
		}
		t.Cleanup(func() { r.Close() })
		regs = append(regs, pluginclient.Region{ID: first + uint32(len(regs)), FD: r.FD(), Length: 4096, Perm: sdk.PermRemoteReadWrite, Kind: sdk.MemoryCPU})
		mems = append(mems, r.Mem())
	}
	for i := range remote / 2 {
		r, err := shm.Create(fmt.Sprintf("%s-batchlocal%d", b.name, i), 8192)
		if err != nil {
			t.Fatalf("%v", err)
		}
		t.Cleanup(func() { r.Close() })
		for page := range 2 {
			regs = append(regs, pluginclient.Region{ID: first + uint32(len(regs)), FD: r.FD(), Offset: uint64(page) * 4096, Length: 4096, Perm: sdk.PermLocal, Kind: sdk.MemoryCPU})
		}
	}
	if err := b.proc.Client.RegisterMemoryBatch(context.Background(), regs); err != nil {
		t.Fatalf("register a batch of %d regions: %v", len(regs), err)
	}
	for _, i := range []int{0, 1, 2, remote - 1} {
		fill(local[:4096], uint64(i))
		off := uint64(i % 7)
		c := a.do(t, ring.Descriptor{Token: token(), Op: ring.OpWrite, LocalRegion: regLocal, Peer: peerB, RemoteRegion: regs[i].ID, RemoteOffset: off, Length: 4096 - off})
		if c.Status != ring.StatusOK || !bytes.Equal(mems[i][off:], local[:4096-off]) {
			t.Fatalf("write into region %d of the batch: %v; bytes equal %v", regs[i].ID, c.Status, bytes.Equal(mems[i][off:], local[:4096-off]))
		}
	}
	// A local-only region of the batch is registered, and no peer may
	// write it.
	if c := a.do(t, ring.Descriptor{Token: token(), Op: ring.OpWrite, LocalRegion: regLocal, Peer: peerB, RemoteRegion: regs[remote+1].ID, Length: 10}); c.Status != ring.StatusPermission {
		t.Fatalf("write into local-only region %d of the batch: %v, want %v", regs[remote+1].ID, c.Status, ring.StatusPermission)
	}
	// A region of the batch is 4 KiB: a write past it is refused.
	if c := a.do(t, ring.Descriptor{Token: token(), Op: ring.OpWrite, LocalRegion: regLocal, Peer: peerB, RemoteRegion: regs[0].ID, RemoteOffset: 1, Length: 4096}); c.Status == ring.StatusOK {
		t.Fatalf("a write past the end of a batch region succeeded")
	}
	ids := make([]uint32, len(regs))
	for i, r := range regs {
		ids[i] = r.ID
	}
	if err := b.proc.Client.UnregisterMemoryBatch(context.Background(), ids); err != nil {
		t.Fatalf("unregister the batch: %v", err)
	}
	if c := a.do(t, ring.Descriptor{Token: token(), Op: ring.OpWrite, LocalRegion: regLocal, Peer: peerB, RemoteRegion: regs[1].ID, Length: 10}); c.Status != ring.StatusNotRegistered {
		t.Fatalf("write into an unregistered region of the batch: %v, want %v", c.Status, ring.StatusNotRegistered)
	}
}

package host_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/segment"
)

// waitBlocks waits for batch id and checks that tasks are every task of
// it, each COMPLETED with want[k] bytes.
func waitBlocks(t *testing.T, e *host.Engine, id host.BatchID, tasks host.BlockTasks, want []uint64) {
	t.Helper()
	if err := e.Wait(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if tasks.Count != len(want) {
		t.Fatalf("the submission added %d tasks, want %d (one per run)", tasks.Count, len(want))
	}
	for k := range tasks.Count {
		st, err := e.TaskStatus(id, tasks.First+k)
		if err != nil {
			t.Fatal(err)
		}
		if st.State != host.StateCompleted || st.Bytes != want[k] {
			t.Fatalf("task %d (run %d): %v with %d bytes (%v); want COMPLETED with %d", tasks.First+k, k, st.State, st.Bytes, st.Err, want[k])
		}
	}
}

// TestBlockListTwoProcesses moves Ferry memory through a prepared block
// list between this engine and one in a child process, over every
// transport both have (tcp and shm), both ways, with merging on and off.
// The local layout is a KV cache's: 4 layers of 32 blocks of 4 KiB, with
// a gap after each layer, so that a run never crosses a layer; the remote
// one is 256 packed blocks. A task is a run: the test reads each run's
// status, and the bytes are checked against the peer's pattern (reads)
// and its sha256 (writes).
func TestBlockListTwoProcesses(t *testing.T) {
	const seed, bs = 5, 4096
	ctx := context.Background()
	a := newEngine(t, "blocks-a")
	b := startPeer(t, "--name", "blocks-b", "--metastore", a.MetastoreURL(), "--expose", "1MiB", "--pattern", fmt.Sprint(seed))
	seg, err := a.OpenSegment(ctx, "blocks-b")
	if err != nil {
		t.Fatal(err)
	}
	if len(seg.Transports) < 2 {
		t.Fatalf("segment offers %v, want tcp and shm", seg.Transports)
	}
	remote := b.Ready.Buffers[0].Base
	local := localBuffer(t, ctx, a, 1<<20)
	ll := host.BlockLayout{BlockSize: bs, Blocks: 32, Layers: 4, LayerStride: 192 << 10}
	rl := host.BlockLayout{BlockSize: bs, Blocks: 256}
	list, err := a.PrepareBlocks(seg.ID, local, ll, remote, rl)
	if err != nil {
		t.Fatal(err)
	}
	// localOff is where local block i lies.
	localOff := func(i uint32) int { return int(i/32)*(192<<10) + int(i%32)*bs }
	for _, tr := range seg.Transports {
		t.Run(tr+"/read", func(t *testing.T) {
			clear(local)
			// Runs: 0-7 <- 100-107 (merged), 32 <- 5 and 33 <- 7 (the
			// remote blocks do not follow), 62-63 <- 200-201 and 64-65
			// <- 202-203 (the boundary of layers 1 and 2 splits them).
			pairs := []host.BlockPair{{Local: 0, Remote: 100}, {Local: 1, Remote: 101}, {Local: 2, Remote: 102}, {Local: 3, Remote: 103}, {Local: 4, Remote: 104}, {Local: 5, Remote: 105}, {Local: 6, Remote: 106}, {Local: 7, Remote: 107}, {Local: 32, Remote: 5}, {Local: 33, Remote: 7}}
			for k := range uint32(4) {
				pairs = append(pairs, host.BlockPair{Local: 62 + k, Remote: 200 + k})
			}
			br := host.BlockRequest{Op: host.Read, Transport: tr}
			starts, err := list.RunStarts(br, pairs, nil)
			if err != nil {
				t.Fatal(err)
			}
			if want := []int{0, 8, 9, 10, 12}; !slices.Equal(starts, want) {
				t.Fatalf("runs start at pairs %v, want %v", starts, want)
			}
			id, err := a.AllocateBatch(len(pairs))
			if err != nil {
				t.Fatal(err)
			}
			defer a.FreeBatch(id)
			tasks, err := a.SubmitBlocks(id, list, br, pairs)
			if err != nil {
				t.Fatal(err)
			}
			waitBlocks(t, a, id, tasks, []uint64{8 * bs, bs, bs, 2 * bs, 2 * bs})
			for k, p := range pairs {
				got := local[localOff(p.Local) : localOff(p.Local)+bs]
				if want := pattern(bs, uint64(p.Remote)*bs, seed); !bytes.Equal(got, want) {
					t.Fatalf("pair %d (local %d <- remote %d): bytes differ from the peer's", k, p.Local, p.Remote)
				}
			}
			// Nothing outside the blocks was written.
			for _, hole := range [][2]int{{8 * bs, localOff(32)}, {localOff(34), localOff(62)}, {localOff(62) + 2*bs, localOff(64)}, {localOff(66), 1 << 20}} {
				if !bytes.Equal(local[hole[0]:hole[1]], make([]byte, hole[1]-hole[0])) {
					t.Fatalf("local bytes %d-%d, outside every block read, were written", hole[0], hole[1])
				}
			}
		})
		for _, noMerge := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/write/nomerge=%v", tr, noMerge), func(t *testing.T) {
				b.ask(t, "fill %d", seed)
				rand.Read(local)
				// Local 64-79 (layer 2) -> remote 16-31, as a range.
				id, err := a.AllocateBatch(16)
				if err != nil {
					t.Fatal(err)
				}
				defer a.FreeBatch(id)
				before, after := b.ask(t, "sha256 %d %d", 15*bs, bs), b.ask(t, "sha256 %d %d", 32*bs, bs)
				tasks, err := a.SubmitBlockRange(id, list, host.BlockRequest{Op: host.Write, Transport: tr, NoMerge: noMerge}, 64, 16, 16)
				if err != nil {
					t.Fatal(err)
				}
				want := []uint64{16 * bs}
				if noMerge {
					want = slices.Repeat([]uint64{bs}, 16)
				}
				waitBlocks(t, a, id, tasks, want)
				if got, sent := b.ask(t, "sha256 %d %d", 16*bs, 16*bs), sum(local[localOff(64):localOff(80)]); got != sent {
					t.Fatalf("peer has sha256 %s for remote blocks 16-31, sent %s", got, sent)
				}
				if b.ask(t, "sha256 %d %d", 15*bs, bs) != before || b.ask(t, "sha256 %d %d", 32*bs, bs) != after {
					t.Fatal("the write touched a neighbouring remote block")
				}
			})
		}
	}
}

// blockPeers is two engines in this process, a and b, with b's memory
// open on a as seg and a's memory registered (LocalOnly).
type blockPeers struct {
	a, b   *host.Engine
	bmem   []byte
	base   uint64 // of bmem in b's segment
	seg    host.Segment
	local  []byte
	closed bool
}

func newBlockPeers(t *testing.T, name string, perm host.Perm) *blockPeers {
	t.Helper()
	ctx := context.Background()
	p := &blockPeers{a: newEngine(t, name+"-a")}
	var err error
	if p.b, err = host.New(ctx, joinConfig(name+"-b", p.a.MetastoreURL())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !p.closed {
			p.b.Close()
		}
	})
	if p.bmem, err = p.b.Allocate(256 << 10); err != nil {
		t.Fatal(err)
	}
	if p.base, err = p.b.Register(ctx, p.bmem, perm); err != nil {
		t.Fatal(err)
	}
	if p.seg, err = p.a.OpenSegment(ctx, name+"-b"); err != nil {
		t.Fatal(err)
	}
	p.local = localBuffer(t, ctx, p.a, 256<<10)
	return p
}

func wantErr(t *testing.T, what string, err, target error, text string) {
	t.Helper()
	if !errors.Is(err, target) || !strings.Contains(err.Error(), text) {
		t.Fatalf("%s: %v; want %v mentioning %q", what, err, target, text)
	}
}

// TestBlockListBadInput: each bad layout or index is refused with a clear
// error when the list is prepared or the blocks are submitted, and then
// nothing is added to the batch and nothing reaches the peer.
func TestBlockListBadInput(t *testing.T) {
	ctx := context.Background()
	p := newBlockPeers(t, "badblocks", host.RemoteReadWrite)
	a := p.a
	bl := host.BlockLayout{BlockSize: 4096, Blocks: 64} // 256 KiB: both buffers exactly
	rand.Read(p.local)

	// Layouts whose blocks run past the registered range.
	_, err := a.PrepareBlocks(p.seg.ID, p.local, bl, p.base+4096, bl)
	wantErr(t, "a remote layout one block past the peer's buffer", err, host.ErrOutOfBounds, "runs past the end of the buffer")
	_, err = a.PrepareBlocks(p.seg.ID, p.local, host.BlockLayout{BlockSize: 4096, Blocks: 8, Layers: 2, LayerStride: 128 << 10}, p.base+112<<10, host.BlockLayout{BlockSize: 4096, Blocks: 8, Layers: 2, LayerStride: 128 << 10})
	wantErr(t, "a remote layer past the peer's buffer", err, host.ErrOutOfBounds, "layer 1 of 2")
	_, err = a.PrepareBlocks(p.seg.ID, p.local[4096:], bl, p.base, bl)
	wantErr(t, "a local layout past the memory given", err, host.ErrOutOfBounds, "runs past the end of the 258048 bytes of local memory given")
	big, err := a.Allocate(512 << 10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Register(ctx, big[:128<<10], host.LocalOnly); err != nil {
		t.Fatal(err)
	}
	_, err = a.PrepareBlocks(p.seg.ID, big, bl, p.base, bl)
	wantErr(t, "a local layout past its registered buffer", err, host.ErrNotRegistered, "not inside one registered buffer")
	_, err = a.PrepareBlocks(p.seg.ID, p.local, host.BlockLayout{BlockSize: 4096, Blocks: 64, Stride: 1024}, p.base, bl)
	wantErr(t, "overlapping blocks", err, host.ErrInvalid, "blocks would overlap")
	_, err = a.PrepareBlocks(p.seg.ID, p.local, bl, p.base, host.BlockLayout{BlockSize: 2048, Blocks: 64})
	wantErr(t, "block sizes that differ", err, host.ErrInvalid, "local blocks are 4096 bytes, remote blocks 2048")
	_, err = a.PrepareBlocks(host.SegmentID(999), p.local, bl, p.base, bl)
	wantErr(t, "a segment never opened", err, host.ErrSegmentNotFound, "segment handle 999 is not open")

	list, id := p.prepare(t, bl, 64)
	w := host.BlockRequest{Op: host.Write}
	// Indices out of range: the call is refused whole, before anything.
	_, err = a.SubmitBlocks(id, list, w, []host.BlockPair{{Local: 0, Remote: 0}, {Local: 1, Remote: 1}, {Local: 2, Remote: 64}})
	wantErr(t, "a remote index past the layout", err, host.ErrOutOfBounds, "pair 2 is (local 2, remote 64): the local layout has 64 blocks, the remote 64")
	_, err = a.SubmitBlocks(id, list, w, []host.BlockPair{{Local: 64, Remote: 0}})
	wantErr(t, "a local index past the layout", err, host.ErrOutOfBounds, "pair 0 is (local 64, remote 0)")
	_, err = a.SubmitBlockRange(id, list, w, 60, 0, 5)
	wantErr(t, "a range past the layout", err, host.ErrOutOfBounds, "range of 5 blocks from local 60")
	_, err = a.SubmitBlocks(id, list, host.BlockRequest{Op: 9}, []host.BlockPair{{Local: 0, Remote: 0}})
	wantErr(t, "an unknown op", err, host.ErrInvalid, "unknown op")
	small, err := a.AllocateBatch(1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.SubmitBlocks(small, list, w, []host.BlockPair{{Local: 0, Remote: 0}, {Local: 2, Remote: 2}})
	wantErr(t, "more runs than the batch holds", err, host.ErrInvalid, "2 tasks (2 pairs): batch holds 0 of 1")
	a.FreeBatch(small)
	if bs, _ := a.BatchStatus(id); bs.Tasks != 0 {
		t.Fatalf("refused submissions added %d tasks", bs.Tasks)
	}
	if !bytes.Equal(p.bmem, make([]byte, len(p.bmem))) {
		t.Fatal("a refused submission reached the peer's memory")
	}

	// Local memory unregistered after the list was prepared: its tasks
	// end INVALID, nothing sent.
	if err := a.Unregister(ctx, p.local); err != nil {
		t.Fatal(err)
	}
	tasks, err := a.SubmitBlockRange(id, list, w, 0, 0, 4)
	if err != nil {
		t.Fatal(err)
	}
	st, err := a.TaskStatus(id, tasks.First)
	if err != nil {
		t.Fatal(err)
	}
	if tasks.Count != 1 || st.State != host.StateInvalid || !errors.Is(st.Err, host.ErrNotRegistered) {
		t.Fatalf("%d tasks, the first %v (%v); want one INVALID with ErrNotRegistered", tasks.Count, st.State, st.Err)
	}
	if _, err := a.Register(ctx, p.local, host.LocalOnly); err != nil {
		t.Fatal(err)
	}

	// A closed segment: its lists are refused.
	if err := a.CloseSegment(ctx, p.seg.ID); err != nil {
		t.Fatal(err)
	}
	_, err = a.SubmitBlockRange(id, list, w, 0, 0, 1)
	wantErr(t, "a list of a closed segment", err, host.ErrSegmentNotFound, "is not open (closed?)")
	_, err = a.PrepareBlocks(p.seg.ID, p.local, bl, p.base, bl)
	wantErr(t, "a layout for a closed segment", err, host.ErrSegmentNotFound, "is not open")
	if !bytes.Equal(p.bmem, make([]byte, len(p.bmem))) {
		t.Fatal("a refused submission reached the peer's memory")
	}
}

// TestBlockListRetiredSegment: when the peer restarts, a list prepared
// for its previous life is refused before anything is sent, and so is a
// new layout on the retired handle.
func TestBlockListRetiredSegment(t *testing.T) {
	ctx := context.Background()
	p := newBlockPeers(t, "retblocks", host.RemoteReadWrite)
	a := p.a
	bl := host.BlockLayout{BlockSize: 4096, Blocks: 64}
	list, id := p.prepare(t, bl, 64)
	p.closed = true
	if err := p.b.Close(); err != nil {
		t.Fatal(err)
	}
	b2, err := host.New(ctx, joinConfig("retblocks-b", a.MetastoreURL()))
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	b2mem, err := b2.Allocate(256 << 10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b2.Register(ctx, b2mem, host.RemoteReadWrite); err != nil {
		t.Fatal(err)
	}
	waitSegment(t, a, p.seg.ID, "the peer's restart", func(retired string, _ bool, _ []segment.Buffer) bool { return retired != "" })
	rand.Read(p.local)
	inc := fmt.Sprintf("now incarnation %#x", b2.Incarnation())
	_, err = a.SubmitBlockRange(id, list, host.BlockRequest{Op: host.Write}, 0, 0, 64)
	wantErr(t, "a list of the peer's previous life", err, host.ErrSegmentNotFound, inc)
	_, err = a.PrepareBlocks(p.seg.ID, p.local, bl, p.base, bl)
	wantErr(t, "a layout on a retired handle", err, host.ErrSegmentNotFound, inc)
	if bs, _ := a.BatchStatus(id); bs.Tasks != 0 {
		t.Fatalf("refused submissions added %d tasks", bs.Tasks)
	}
	if !bytes.Equal(b2mem, make([]byte, len(b2mem))) {
		t.Fatal("a list of the previous life reached the restarted peer's memory")
	}
}

// prepare prepares layout bl on both sides (p.local and p.base) and
// allocates a batch of tasks tasks, freed when the test ends.
func (p *blockPeers) prepare(t *testing.T, bl host.BlockLayout, tasks int) (*host.BlockList, host.BatchID) {
	t.Helper()
	list, err := p.a.PrepareBlocks(p.seg.ID, p.local, bl, p.base, bl)
	if err != nil {
		t.Fatal(err)
	}
	id, err := p.a.AllocateBatch(tasks)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.a.FreeBatch(id) })
	return list, id
}

// TestBlockListPermission: a write into blocks of a read-only buffer is
// refused whole; a read from them moves verified bytes.
func TestBlockListPermission(t *testing.T) {
	p := newBlockPeers(t, "permblocks", host.RemoteRead)
	a := p.a
	rand.Read(p.bmem)
	bl := host.BlockLayout{BlockSize: 1024, Blocks: 256, Stride: 1024}
	list, id := p.prepare(t, bl, 256)
	_, err := a.SubmitBlockRange(id, list, host.BlockRequest{Op: host.Write}, 0, 0, 4)
	wantErr(t, "a write into read-only blocks", err, host.ErrPermission, "does not allow a write")
	tasks, err := a.SubmitBlocks(id, list, host.BlockRequest{Op: host.Read}, []host.BlockPair{{Local: 10, Remote: 200}, {Local: 11, Remote: 201}, {Local: 255, Remote: 0}})
	if err != nil {
		t.Fatal(err)
	}
	waitBlocks(t, a, id, tasks, []uint64{2048, 1024})
	if !bytes.Equal(p.local[10<<10:12<<10], p.bmem[200<<10:202<<10]) || !bytes.Equal(p.local[255<<10:], p.bmem[:1024]) {
		t.Fatal("blocks read differ from the peer's")
	}
}

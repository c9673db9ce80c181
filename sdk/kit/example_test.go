package kit_test

import (
	"context"
	"fmt"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/kit"
	"github.com/ferrydev/ferry/sdk/ring"
)

// loop is a transport whose every peer is the engine itself: a write
// copies from one of its regions into another. It has what a real
// transport has, a worker goroutine that Stop waits for, in few lines.
type loop struct {
	base kit.Base[*loopRegion, *loopPeer]
	work chan loopOp
}

type loopRegion struct{ kit.RegionBase }

type loopPeer struct{}

func (*loopPeer) Close() {}

type loopOp struct {
	d   ring.Descriptor
	r   *loopRegion
	mem []byte
	c   sdk.Completer
}

func (l *loop) Start(cfg sdk.StartConfig) (sdk.Endpoint, error) {
	return l.base.Start(cfg, func() (sdk.Endpoint, error) {
		l.work = make(chan loopOp, 16)
		l.base.Goroutines.Add(1)
		go l.worker()
		return sdk.Endpoint("loop:" + cfg.Engine), nil
	})
}

func (l *loop) worker() {
	defer l.base.Goroutines.Done()
	for o := range l.work {
		st, n := ring.StatusOK, uint64(len(o.mem))
		dst := l.base.Regions.Acquire(o.d.RemoteRegion)
		switch {
		case dst == nil:
			st, n = ring.StatusNotRegistered, 0
		case o.d.RemoteOffset+n > uint64(len(dst.Mem)):
			dst.Release()
			st, n = ring.StatusOutOfBounds, 0
		default:
			copy(dst.Mem[o.d.RemoteOffset:], o.mem)
			dst.Release()
		}
		o.r.Release()
		l.base.Outcomes.Count(st)
		o.c.Complete(o.d.Token, st, n)
	}
}

func (l *loop) Submit(d *ring.Descriptor, c sdk.Completer) {
	if _, r, mem, ok := l.base.Accept(d, c); ok {
		l.work <- loopOp{d: *d, r: r, mem: mem, c: c}
	}
}

// Stop closes the work queue: the SDK calls Stop once its lanes no longer
// call Submit, and a Submit after Stop completes in Accept.
func (l *loop) Stop(ctx context.Context) error {
	return l.base.Stop(ctx, func() {
		l.base.Peers.CloseAll()
		if l.base.Started() {
			close(l.work)
		}
	})
}

type printer struct{ done chan struct{} }

func (p printer) Complete(token uint64, st ring.Status, n uint64) {
	fmt.Printf("descriptor %d: %v, %d bytes\n", token, st, n)
	p.done <- struct{}{}
}

// Example drives a transport built on Base the way the SDK does.
func Example() {
	l := &loop{base: kit.Base[*loopRegion, *loopPeer]{Name: "loop"}}
	ep, err := l.Start(sdk.StartConfig{Engine: "e", Incarnation: 1})
	fmt.Println(string(ep), err)
	src, dst := []byte("hello"), make([]byte, 5)
	for id, mem := range map[uint32][]byte{1: src, 2: dst} {
		err := l.base.RegisterMemory(sdk.Region{ID: id, Mem: mem, Perm: sdk.PermRemoteReadWrite}, func(r sdk.Region) *loopRegion {
			g := &loopRegion{}
			g.Init(r)
			return g
		})
		if err != nil {
			fmt.Println(err)
		}
	}
	fmt.Println(l.base.AddPeer(7, &loopPeer{}, nil))
	p := printer{done: make(chan struct{}, 1)}
	l.Submit(&ring.Descriptor{Token: 1, Op: ring.OpWrite, Peer: 7, LocalRegion: 1, RemoteRegion: 2, Length: 5}, p)
	<-p.done
	l.Submit(&ring.Descriptor{Token: 2, Op: ring.OpWrite, Peer: 8, LocalRegion: 1, RemoteRegion: 2, Length: 5}, p)
	<-p.done
	fmt.Println(string(dst), l.Stop(context.Background()))
	l.Submit(&ring.Descriptor{Token: 3, Op: ring.OpWrite, Peer: 7, LocalRegion: 1, RemoteRegion: 2, Length: 5}, p)
	<-p.done
	// Output:
	// loop:e <nil>
	// <nil>
	// descriptor 1: ok, 5 bytes
	// descriptor 2: peer not opened, 0 bytes
	// hello <nil>
	// descriptor 3: plugin shutting down, 0 bytes
}

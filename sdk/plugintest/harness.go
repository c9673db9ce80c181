package plugintest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/pluginclient"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
	"github.com/ferrydev/ferry/sdk/shm"
)

// completionWait bounds how long the suite waits for one completion.
const completionWait = 30 * time.Second

// Instance is one running copy of a plugin under test, driven the way the
// host drives it: its own regions, one lane of rings, a reaper that checks
// every descriptor completes exactly once. Plugin authors use it to write
// their own end-to-end tests beside Run.
type Instance struct {
	t        testing.TB
	name     string
	inc      uint64
	proc     *pluginclient.Process
	endpoint sdk.Endpoint
	sqr, cqr *shm.Region
	sq, cq   *ring.Ring
	sqMu     sync.Mutex

	mu      sync.Mutex
	waiting map[uint64]chan ring.Descriptor
	seen    map[uint64]int // completions per token, to catch duplicates
	stop    chan struct{}
	reaped  chan struct{}
	regions map[uint32]*shm.Region

	// noStop: the plugin is expected to be stalled or gone; cleanup kills
	// it without asking it to stop.
	noStop bool
}

// Launch starts binary as a Ferry host would, starts it as engine name
// with incarnation inc and config body cfg, attaches one lane and returns
// it; the test's cleanup stops it and checks completions. A plugin whose
// probe says it is unavailable skips the test.
func Launch(t testing.TB, binary, name string, inc uint64, cfg []byte) *Instance {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := pluginclient.Launch(ctx, binary, nil, nil)
	if err != nil {
		t.Fatalf("launch %s: %v", binary, err)
	}
	in := &Instance{t: t, name: name, inc: inc, proc: p,
		waiting: map[uint64]chan ring.Descriptor{}, seen: map[uint64]int{},
		stop: make(chan struct{}), reaped: make(chan struct{}), regions: map[uint32]*shm.Region{}}
	pr, err := p.Client.Probe(ctx)
	if err != nil {
		p.Kill()
		t.Fatalf("%s: probe: %v", name, err)
	}
	if !pr.Available {
		p.Kill()
		t.Skipf("plugin %s unavailable on this machine: %s", binary, pr.Reason)
	}
	in.endpoint, err = p.Client.Start(ctx, sdk.StartConfig{Engine: name, Incarnation: inc, MachineID: "plugintest", Config: cfg, ConfigFile: name + ".hcl", ConfigLine: 1, ConfigColumn: 1})
	if err != nil {
		p.Kill()
		t.Fatalf("%s: start: %v", name, err)
	}
	const depth = 1024
	if in.sqr, err = shm.Create(name+"-sq", ring.Size(depth)); err != nil {
		t.Fatal(err)
	}
	if in.cqr, err = shm.Create(name+"-cq", ring.Size(depth)); err != nil {
		t.Fatal(err)
	}
	if in.sq, err = ring.Init(in.sqr.Mem(), depth); err != nil {
		t.Fatal(err)
	}
	if in.cq, err = ring.Init(in.cqr.Mem(), depth); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Client.AttachLane(ctx, 0, 0, in.sqr, in.cqr, pluginclient.LaneTiming{Spin: sdk.DefaultSpin}); err != nil {
		t.Fatalf("%s: attach lane: %v", name, err)
	}
	go in.reap()
	t.Cleanup(in.close)
	return in
}

func (in *Instance) reap() {
	defer close(in.reaped)
	buf := make([]ring.Descriptor, 64)
	for {
		select {
		case <-in.stop:
			return
		default:
		}
		n := in.cq.Dequeue(buf)
		if n == 0 {
			in.cq.Wait(sdk.DefaultSpin, 50*time.Millisecond)
			continue
		}
		in.mu.Lock()
		for _, d := range buf[:n] {
			in.seen[d.Token]++
			if ch, ok := in.waiting[d.Token]; ok {
				ch <- d
			}
		}
		in.mu.Unlock()
	}
}

func (in *Instance) close() {
	if !in.noStop {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := in.proc.Client.Stop(ctx); err != nil {
			in.t.Errorf("%s: stop: %v", in.name, err)
		}
		cancel()
	}
	close(in.stop)
	in.cq.Wake()
	<-in.reaped
	in.proc.Kill()
	<-in.proc.Exited()
	for _, r := range in.regions {
		r.Close()
	}
	in.sqr.Close()
	in.cqr.Close()
	in.mu.Lock()
	defer in.mu.Unlock()
	for tok, n := range in.seen {
		if n != 1 {
			in.t.Errorf("%s: token %#x completed %d times, want exactly once", in.name, tok, n)
		}
	}
}

// Region creates a shared region of size bytes and registers it as id.
func (in *Instance) Region(id uint32, size int, perm sdk.Perm) []byte {
	in.t.Helper()
	r, err := shm.Create(fmt.Sprintf("%s-r%d", in.name, id), size)
	if err != nil {
		in.t.Fatal(err)
	}
	in.regions[id] = r
	if err := in.proc.Client.RegisterMemory(context.Background(), id, r.FD(), 0, uint64(size), perm, sdk.MemoryCPU); err != nil {
		in.t.Fatalf("%s: register region %d: %v", in.name, id, err)
	}
	return r.Mem()
}

// Submit publishes descriptors as one batch and returns a channel per
// descriptor for its completion.
func (in *Instance) Submit(ds ...ring.Descriptor) []chan ring.Descriptor {
	chs := make([]chan ring.Descriptor, len(ds))
	in.mu.Lock()
	for i := range ds {
		chs[i] = make(chan ring.Descriptor, 2)
		in.waiting[ds[i].Token] = chs[i]
	}
	in.mu.Unlock()
	in.sqMu.Lock()
	defer in.sqMu.Unlock()
	for i := range ds {
		for !in.sq.Enqueue(&ds[i]) {
			in.sq.Publish()
			in.sq.WaitSpace(sdk.DefaultSpin, 10*time.Millisecond)
		}
	}
	in.sq.Publish()
	return chs
}

// Do submits one descriptor and waits for its completion.
func (in *Instance) Do(d ring.Descriptor) ring.Descriptor {
	in.t.Helper()
	return in.Wait(in.Submit(d)[0], d.Token)
}

// Wait returns the completion that arrives on ch, failing the test if none
// comes in time.
func (in *Instance) Wait(ch chan ring.Descriptor, token uint64) ring.Descriptor {
	in.t.Helper()
	select {
	case c := <-ch:
		return c
	case <-time.After(completionWait):
		in.t.Fatalf("%s: no completion for token %#x within %v", in.name, token, completionWait)
	}
	return ring.Descriptor{}
}

// OpenPeer makes b known to in as peer id, addressed at incarnation inc.
func (in *Instance) OpenPeer(id uint32, b *Instance, inc uint64) {
	in.t.Helper()
	if err := in.proc.Client.OpenPeer(context.Background(), sdk.Peer{ID: id, Segment: b.name, Incarnation: inc, MachineID: "plugintest", Endpoint: b.endpoint}); err != nil {
		in.t.Fatalf("%s: open peer: %v", in.name, err)
	}
}

// Stats reads the plugin's counters.
func (in *Instance) Stats() map[string]uint64 {
	in.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := in.proc.Client.Stats(ctx)
	if err != nil {
		in.t.Fatalf("%s: stats: %v", in.name, err)
	}
	return s
}

// Process returns the plugin process (to kill it, or to watch it exit).
func (in *Instance) Process() *pluginclient.Process { return in.proc }

// ExpectGone tells the cleanup that the plugin is meant to be stalled or
// dead: it is killed without being asked to stop.
func (in *Instance) ExpectGone() { in.noStop = true }

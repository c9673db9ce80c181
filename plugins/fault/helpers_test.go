package fault_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
	"github.com/ferrydev/ferry/sdk/shm"
)

// binary is ferry-plugin-fault, built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	dir, err := plugintest.BuildBinaries(map[string]string{
		"github.com/ferrydev/ferry/plugins/fault/cmd/ferry-plugin-fault": "ferry-plugin-fault",
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	binary = filepath.Join(dir, "ferry-plugin-fault")
	code := 0
	func() {
		defer os.RemoveAll(dir)
		code = m.Run()
	}()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// waitLimit is a safety net against a hang, never a synchronisation point.
const waitLimit = 30 * time.Second

// instance is one running plugin process driven through its rings the way
// the host drives it (after sdk/plugintest's harness).
type instance struct {
	t        testing.TB
	name     string
	proc     *sdk.Process
	endpoint sdk.Endpoint
	sqr, cqr *shm.Region
	sq, cq   *ring.Ring
	sqMu     sync.Mutex

	mu      sync.Mutex
	waiting map[uint64]chan ring.Descriptor
	seen    map[uint64]int
	stop    chan struct{}
	reaped  chan struct{}
	regions map[uint32]*shm.Region

	// noStop: the plugin is expected to be stalled or gone; close kills it
	// without asking it to stop.
	noStop bool
}

func launch(t testing.TB, name string, inc uint64, cfg string) *instance {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := sdk.Launch(ctx, binary, nil, nil)
	if err != nil {
		t.Fatalf("launch %s: %v", binary, err)
	}
	in := &instance{t: t, name: name, proc: p,
		waiting: map[uint64]chan ring.Descriptor{}, seen: map[uint64]int{},
		stop: make(chan struct{}), reaped: make(chan struct{}), regions: map[uint32]*shm.Region{}}
	in.endpoint, err = p.Client.Start(ctx, sdk.StartConfig{Engine: name, Incarnation: inc, MachineID: "faulttest",
		Config: []byte(cfg), ConfigFile: name + ".hcl", ConfigLine: 1, ConfigColumn: 1})
	if err != nil {
		p.Kill()
		t.Fatalf("%s: start: %v", name, err)
	}
	const depth = 256
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
	if err := p.Client.AttachLane(ctx, 0, in.sqr, in.cqr, 20*time.Microsecond); err != nil {
		t.Fatalf("%s: attach lane: %v", name, err)
	}
	go in.reap()
	t.Cleanup(in.close)
	return in
}

func (in *instance) reap() {
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
			in.cq.Wait(20*time.Microsecond, 50*time.Millisecond)
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

func (in *instance) close() {
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

// region creates a shared region of size bytes and registers it as id.
func (in *instance) region(id uint32, size int, perm sdk.Perm) []byte {
	in.t.Helper()
	r, err := shm.Create(fmt.Sprintf("%s-r%d", in.name, id), size)
	if err != nil {
		in.t.Fatal(err)
	}
	in.regions[id] = r
	if err := in.proc.Client.RegisterMemory(context.Background(), id, r.FD(), 0, uint64(size), perm, "cpu"); err != nil {
		in.t.Fatalf("%s: register region %d: %v", in.name, id, err)
	}
	return r.Mem()
}

// openPeer makes b known to in as peer id.
func (in *instance) openPeer(id uint32, b *instance, inc uint64) {
	in.t.Helper()
	if err := in.proc.Client.OpenPeer(context.Background(), sdk.Peer{ID: id, Segment: b.name, Incarnation: inc, MachineID: "faulttest", Endpoint: b.endpoint}); err != nil {
		in.t.Fatalf("%s: open peer: %v", in.name, err)
	}
}

// submit publishes descriptors as one batch and returns a channel per
// descriptor for its completion.
func (in *instance) submit(ds ...ring.Descriptor) []chan ring.Descriptor {
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
			in.sq.WaitSpace(20*time.Microsecond, 10*time.Millisecond)
		}
	}
	in.sq.Publish()
	return chs
}

// do submits one descriptor and waits for its completion.
func (in *instance) do(d ring.Descriptor) ring.Descriptor {
	in.t.Helper()
	return in.wait(in.submit(d)[0], d.Token)
}

func (in *instance) wait(ch chan ring.Descriptor, token uint64) ring.Descriptor {
	in.t.Helper()
	select {
	case c := <-ch:
		return c
	case <-time.After(waitLimit):
		in.t.Fatalf("%s: no completion for token %#x within %v", in.name, token, waitLimit)
	}
	return ring.Descriptor{}
}

// stats reads the plugin's counters.
func (in *instance) stats() map[string]uint64 {
	in.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := in.proc.Client.Stats(ctx)
	if err != nil {
		in.t.Fatalf("%s: stats: %v", in.name, err)
	}
	return s
}

// startErr launches the plugin, starts it with cfg and returns Start's
// error.
func startErr(t *testing.T, cfg string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := sdk.Launch(ctx, binary, nil, nil)
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	defer func() { p.Kill(); <-p.Exited() }()
	_, err = p.Client.Start(ctx, sdk.StartConfig{Engine: "bad", Incarnation: 1, Config: []byte(cfg), ConfigFile: "bad.hcl", ConfigLine: 1, ConfigColumn: 1})
	return err
}

package plugintest

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/internal/pluginclient"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
	"github.com/ferrydev/ferry/sdk/shm"
)

// completionWait bounds how long the suite waits for one completion,
// unless Config.Wait says otherwise.
const completionWait = 30 * time.Second

// Instance is one running copy of a plugin under test, driven the way the
// host drives it: its own regions, one lane of rings, a reaper that checks
// every descriptor completes exactly once, with its own token and no more
// bytes than it carried. Plugin authors use it to write their own
// end-to-end tests beside Run.
type Instance struct {
	t        TB
	name     string
	inc      uint64
	run      uint64
	proc     *pluginclient.Process
	endpoint sdk.Endpoint
	sqr, cqr *shm.Region
	sq, cq   *ring.Ring
	sqMu     sync.Mutex
	wait     time.Duration
	stderr   *tail

	mu       sync.Mutex
	waiting  map[uint64]pending
	seen     map[uint64]int // completions per token, to catch duplicates
	problems []string       // broken completions the reaper saw, not yet reported
	alert    chan struct{}  // signalled when problems grows
	stop     chan struct{}
	reaped   chan struct{}
	regions  map[uint32]*shm.Region

	// noStop: the plugin is expected to be stalled or gone; cleanup kills
	// it without asking it to stop.
	noStop bool
}

// pending is a descriptor submitted and not yet completed.
type pending struct {
	ch     chan ring.Descriptor
	length uint64
}

// launchOptions are what the suite sets beyond Launch's arguments.
type launchOptions struct {
	wait time.Duration // per completion; 0: completionWait
	run  uint64        // StartConfig.Run
	// owned: the caller closes the instance (Instance.close) instead of
	// t's cleanup, so that it can outlive the case that launched it.
	owned bool
}

// Launch starts binary as a Ferry host would, starts it as engine name
// with incarnation inc and config body cfg, attaches one lane and returns
// it; the test's cleanup stops it and checks completions. A plugin whose
// probe says it is unavailable skips the test.
func Launch(t TB, binary, name string, inc uint64, cfg []byte) *Instance {
	t.Helper()
	return launch(t, binary, name, inc, cfg, launchOptions{})
}

func launch(t TB, binary, name string, inc uint64, cfg []byte, o launchOptions) *Instance {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stderr := newTail(name+".", 30)
	// go-plugin logs each line the plugin writes to stderr (a panic's
	// trace among them) at debug level: keep the last ones to show when
	// it dies.
	logger := hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Debug, Output: stderr})
	p, err := pluginclient.Launch(ctx, binary, nil, logger)
	if err != nil {
		t.Fatalf("launch %s: %v%s", binary, err, stderr.show())
	}
	in := &Instance{t: t, name: name, inc: inc, run: o.run, proc: p, wait: o.wait, stderr: stderr,
		waiting: map[uint64]pending{}, seen: map[uint64]int{}, alert: make(chan struct{}, 1),
		stop: make(chan struct{}), reaped: make(chan struct{}), regions: map[uint32]*shm.Region{}}
	if in.wait <= 0 {
		in.wait = completionWait
	}
	fail := func(format string, args ...any) {
		p.Kill()
		t.Fatalf("%s: "+format+"%s", append(append([]any{name}, args...), in.Died())...)
	}
	pr, err := p.Client.Probe(ctx)
	if err != nil {
		fail("probe: %v", err)
	}
	if !pr.Available {
		p.Kill()
		t.Skipf("plugin %s unavailable on this machine: %s", binary, pr.Reason)
	}
	in.endpoint, err = p.Client.Start(ctx, sdk.StartConfig{Engine: name, Incarnation: inc, MachineID: "plugintest", Config: cfg, ConfigFile: name + ".hcl", ConfigLine: 1, ConfigColumn: 1, Run: o.run})
	if err != nil {
		fail("start: %v", err)
	}
	const depth = 1024
	if in.sqr, err = shm.Create(name+"-sq", ring.Size(depth)); err != nil {
		fail("%v", err)
	}
	if in.cqr, err = shm.Create(name+"-cq", ring.Size(depth)); err != nil {
		fail("%v", err)
	}
	if in.sq, err = ring.Init(in.sqr.Mem(), depth); err != nil {
		fail("%v", err)
	}
	if in.cq, err = ring.Init(in.cqr.Mem(), depth); err != nil {
		fail("%v", err)
	}
	if _, err := p.Client.AttachLane(ctx, 0, 0, in.sqr, in.cqr, pluginclient.LaneTiming{Spin: sdk.DefaultSpin}); err != nil {
		fail("attach lane: %v", err)
	}
	go in.reap()
	if !o.owned {
		t.Cleanup(func() {
			for _, p := range in.close() {
				t.Errorf("%s", p)
			}
		})
	}
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
			in.complete(d)
		}
		in.mu.Unlock()
	}
}

// complete takes one completion off the ring, under in.mu, and names
// what is wrong with it.
func (in *Instance) complete(d ring.Descriptor) {
	in.seen[d.Token]++
	if n := in.seen[d.Token]; n > 1 {
		in.problem(fmt.Sprintf("%s: duplicate completion: token %#x completed %d times, want exactly once", in.name, d.Token, n))
		return
	}
	p, ok := in.waiting[d.Token]
	if !ok {
		in.problem(fmt.Sprintf("%s: stray completion token %#x: no descriptor outstanding has it%s", in.name, d.Token, in.nearest(d.Token)))
		return
	}
	delete(in.waiting, d.Token)
	if d.Length > p.length {
		in.problem(fmt.Sprintf("%s: over-reported byte count: token %#x completed %v with %d bytes, its descriptor carried %d", in.name, d.Token, d.Status, d.Length, p.length))
	}
	p.ch <- d
}

// nearest names an outstanding token one bit away from a stray one: the
// likely descriptor whose completion it should have been.
func (in *Instance) nearest(tok uint64) string {
	for t := range in.waiting {
		if bits.OnesCount64(t^tok) == 1 {
			return fmt.Sprintf(" (token %#x, outstanding, differs in bit %d)", t, bits.TrailingZeros64(t^tok))
		}
	}
	return ""
}

func (in *Instance) problem(p string) {
	in.problems = append(in.problems, p)
	select {
	case in.alert <- struct{}{}:
	default:
	}
}

// Problems returns, and forgets, the broken completions the reaper saw
// since the last call: stray tokens, duplicates, over-reported byte
// counts.
func (in *Instance) Problems() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	p := in.problems
	in.problems = nil
	return p
}

// Summarize joins problems into one message, the first few in full: a
// plugin that breaks the contract often breaks it for every descriptor.
func Summarize(problems []string) string {
	const shown = 3
	if len(problems) <= shown {
		return strings.Join(problems, "\n")
	}
	return fmt.Sprintf("%s\n(and %d more)", strings.Join(problems[:shown], "\n"), len(problems)-shown)
}

// Outstanding returns the tokens submitted and not completed.
func (in *Instance) Outstanding() []uint64 {
	in.mu.Lock()
	defer in.mu.Unlock()
	var ts []uint64
	for t := range in.waiting {
		ts = append(ts, t)
	}
	slices.Sort(ts)
	return ts
}

// Drain waits up to d for every descriptor submitted to complete, and
// returns the tokens still outstanding after it.
func (in *Instance) Drain(d time.Duration) []uint64 {
	until := time.Now().Add(d)
	for {
		ts := in.Outstanding()
		if len(ts) == 0 || time.Now().After(until) || in.Gone() {
			return ts
		}
		time.Sleep(time.Millisecond)
	}
}

// forget stops waiting for ds, which will never complete (they were
// never taken off the submission ring).
func (in *Instance) forget(ds []ring.Descriptor) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, d := range ds {
		delete(in.waiting, d.Token)
	}
}

// Gone reports whether the plugin process has exited.
func (in *Instance) Gone() bool {
	select {
	case <-in.proc.Exited():
		return true
	default:
		return false
	}
}

// Died describes how the plugin process ended, with the tail of what it
// wrote to stderr: "" while it runs.
func (in *Instance) Died() string {
	if !in.Gone() {
		return ""
	}
	state := in.proc.ExitState(time.Second)
	if state == "" {
		state = "exit status unknown"
	}
	return fmt.Sprintf("\nplugin %s died (%s)%s", in.name, state, in.stderr.show())
}

// close stops the plugin, frees its rings and regions, and returns what
// went wrong: a Stop that failed, completions seen more than once, and
// problems not yet reported.
func (in *Instance) close() []string {
	var out []string
	if !in.noStop && !in.Gone() {
		ctx, cancel := context.WithTimeout(context.Background(), in.wait)
		if err := in.proc.Client.Stop(ctx); err != nil {
			out = append(out, fmt.Sprintf("%s: stop: %v", in.name, err))
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
	return append(out, in.Problems()...)
}

// Region creates a shared region of size bytes and registers it as id.
func (in *Instance) Region(id uint32, size int, perm sdk.Perm) []byte {
	in.t.Helper()
	return in.region(in.t, id, size, perm, sdk.MemoryCPU)
}

func (in *Instance) region(t TB, id uint32, size int, perm sdk.Perm, kind sdk.MemoryKind) []byte {
	t.Helper()
	r, err := shm.Create(fmt.Sprintf("%s-r%d", in.name, id), size)
	if err != nil {
		t.Fatalf("%v", err)
	}
	if err := in.proc.Client.RegisterMemory(context.Background(), id, r.FD(), 0, uint64(size), perm, kind); err != nil {
		r.Close()
		t.Fatalf("%s: register region %d (%s): %v%s", in.name, id, kind, err, in.Died())
	}
	if old := in.regions[id]; old != nil {
		old.Close()
	}
	in.regions[id] = r
	return r.Mem()
}

// Submit publishes descriptors as one batch and returns a channel per
// descriptor for its completion.
func (in *Instance) Submit(ds ...ring.Descriptor) []chan ring.Descriptor {
	chs := make([]chan ring.Descriptor, len(ds))
	in.mu.Lock()
	for i := range ds {
		chs[i] = make(chan ring.Descriptor, 1)
		in.waiting[ds[i].Token] = pending{ch: chs[i], length: ds[i].Length}
	}
	in.mu.Unlock()
	in.sqMu.Lock()
	defer in.sqMu.Unlock()
	for i := range ds {
		for !in.sq.Enqueue(&ds[i]) {
			in.sq.Publish()
			if in.Gone() {
				return chs
			}
			in.sq.WaitSpace(sdk.DefaultSpin, 10*time.Millisecond)
		}
	}
	in.sq.Publish()
	return chs
}

// Do submits one descriptor and waits for its completion.
func (in *Instance) Do(d ring.Descriptor) ring.Descriptor {
	in.t.Helper()
	return in.do(in.t, d)
}

func (in *Instance) do(t TB, d ring.Descriptor) ring.Descriptor {
	t.Helper()
	return in.waitFor(t, in.Submit(d)[0], d.Token)
}

// Wait returns the completion that arrives on ch, failing the test if none
// comes in time, if the plugin dies first, or if a completion breaks the
// contract (a stray token, a duplicate, an over-reported byte count).
func (in *Instance) Wait(ch chan ring.Descriptor, token uint64) ring.Descriptor {
	in.t.Helper()
	return in.waitFor(in.t, ch, token)
}

func (in *Instance) waitFor(t TB, ch chan ring.Descriptor, token uint64) ring.Descriptor {
	t.Helper()
	timer := time.NewTimer(in.wait)
	defer timer.Stop()
	for {
		select {
		case c := <-ch:
			if p := in.Problems(); len(p) > 0 {
				t.Fatalf("%s", Summarize(p))
			}
			return c
		case <-in.alert:
			if p := in.Problems(); len(p) > 0 {
				t.Fatalf("%s", Summarize(p))
			}
		case <-in.proc.Exited():
			// A completion posted just before the exit still counts.
			select {
			case c := <-ch:
				return c
			case <-time.After(100 * time.Millisecond):
			}
			t.Fatalf("%s: no completion for token %#x: the plugin died%s", in.name, token, in.Died())
		case <-timer.C:
			t.Fatalf("%s: hang: no completion for token %#x within %v (%d descriptors outstanding)", in.name, token, in.wait, len(in.Outstanding()))
		}
	}
}

// OpenPeer makes b known to in as peer id, addressed at incarnation inc.
func (in *Instance) OpenPeer(id uint32, b *Instance, inc uint64) {
	in.t.Helper()
	in.openPeer(in.t, id, b, inc)
}

func (in *Instance) openPeer(t TB, id uint32, b *Instance, inc uint64) {
	t.Helper()
	if err := in.proc.Client.OpenPeer(context.Background(), sdk.Peer{ID: id, Segment: b.name, Incarnation: inc, MachineID: "plugintest", Endpoint: b.endpoint}); err != nil {
		t.Fatalf("%s: open peer: %v%s", in.name, err, in.Died())
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

// tail keeps the last lines the plugin wrote, as go-plugin logs them
// through a logger named for the instance: "TIME [LEVEL] NAME.BINARY:
// TEXT". The host side's own lines (go-plugin's) are left out.
type tail struct {
	mu     sync.Mutex
	lines  []string
	max    int
	plugin string // "NAME.": the prefix of the plugin's sub-logger
}

func newTail(plugin string, max int) *tail { return &tail{plugin: plugin, max: max} }

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		i := strings.Index(l, "] "+t.plugin)
		if i < 0 {
			continue
		}
		level := ""
		if j := strings.LastIndex(l[:i], "["); j >= 0 {
			level = l[j : i+1]
		}
		text := l[i+2:]
		if k := strings.Index(text, ": "); k >= 0 {
			text = text[k+2:]
		} else {
			text = ""
		}
		t.lines = append(t.lines, strings.TrimRight(level+" "+text, " "))
	}
	if over := len(t.lines) - t.max; over > 0 {
		t.lines = append(t.lines[:0], t.lines[over:]...)
	}
	return len(p), nil
}

// show returns the kept lines as a block to append to a message, or "".
func (t *tail) show() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == 0 {
		return ""
	}
	return "\nlast lines of its stderr:\n\t" + strings.Join(t.lines, "\n\t")
}

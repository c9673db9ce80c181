package host_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/ferrydev/ferry/host/stages/audit"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/ferrydev/ferry/host"
)

// The chaos test's layout. The peer exposes one buffer filled with the
// pattern of chaosPatternSeed: its first chaosReadSpan bytes are where
// reads come from and are never written; after them, each worker (and the
// stall driver) owns chaosSpan bytes that only its writes go to, at the
// same offsets as the local chaosSpan bytes it owns.
const (
	chaosWorkers     = 4
	chaosReadSpan    = 4 << 20
	chaosSpan        = 24 << 20
	chaosMaxSize     = 256 << 10
	chaosMaxBatch    = 4
	chaosPatternSeed = 29
	// chaosBound is the whole run's deadline: hitting it fails the test.
	chaosBound = 4 * time.Minute
	// chaosDefaultTasks is how many transfers the run makes unless
	// FERRY_CHAOS_TASKS says otherwise (about 15 s under -race on two
	// cores).
	chaosDefaultTasks = 10000

	// The stall driver runs chaosStallCycles cycles: the stall plugin
	// lets chaosStallAfter descriptors through, then stalls; after
	// chaosStallTimeouts tasks ended TIMEOUT on it, the driver kills it.
	chaosStallCycles   = 3
	chaosStallAfter    = 20
	chaosStallTimeouts = 3
	chaosStallDeadline = 200 * time.Millisecond
	// chaosEndGrace is the initiator's supervise.end_grace: how long a
	// plugin may hold an ended task's slices before it is killed. Under
	// the race detector on a loaded machine of two cores, the fault
	// plugin's own 30 ms delays plus its starved threads held an ended
	// task's slices past 300 ms (TestChaos and
	// TestObserverSeesEveryTransition each failed once at load 15-24):
	// four times as long there.
	chaosEndGrace = 300 * time.Millisecond * raceSlowdown
)

// chaosConfig is the HCL of the chaos test's engines. With faults (the
// initiator), plugin "fault" drops, corrupts and delays a few descriptors
// and crashes at descriptor crashAfter of every run; plugin "stall" (the
// same binary) stalls after chaosStallAfter descriptors; plain tcp is the
// failover target. Without faults (the peer), all three are plain TCP
// under those names.
func chaosConfig(name string, faults bool, crashAfter int) string {
	faultBlocks, stallBlocks := "", ""
	if faults {
		faultBlocks = fmt.Sprintf(`
    fault "crash" {
      after = %d
    }
    fault "drop" {
      rate = 0.01
      seed = 3
    }
    fault "corrupt" {
      rate = 0.01
      seed = 5
    }
    fault "delay" {
      rate  = 0.03
      seed  = 7
      delay = "30ms"
    }`, crashAfter)
		stallBlocks = fmt.Sprintf(`
    fault "stall" {
      after = %d
    }`, chaosStallAfter)
	}
	supervise := ""
	if faults {
		// A stalled plugin holds its timed-out tasks' slices: the
		// engine kills it after end_grace (the tasks end TIMEOUT then).
		supervise = fmt.Sprintf("supervise {\n  end_grace = %q\n  interval = \"100ms\"\n}\n", chaosEndGrace.String())
	}
	return fmt.Sprintf(`name = %q
plugin_dir = %q
%splugin "fault" {
  config {%s
    tcp {
      listen = ["127.0.0.1:0"]
    }
  }
}
plugin "stall" {
  path = %q
  config {%s
    tcp {
      listen = ["127.0.0.1:0"]
    }
  }
}
plugin "tcp" {
  config {
    listen = ["127.0.0.1:0"]
  }
}
policy "chaos" {
  transports = ["fault", "tcp"]
}
`, name, binDir, supervise, faultBlocks, filepath.Join(binDir, "ferry-plugin-fault"), stallBlocks)
}

// chaosTask is one request of the run and where its bytes live.
type chaosTask struct {
	req  host.Request
	off  int // of its local range (and, for a write, its remote range) in the owner's span
	roff int // read: offset in the read region
	n    int
	// timed says the task may end TIMEOUT: it has a deadline, or its
	// op waits under a context with one.
	timed bool
	// cancelable says its op may cancel it.
	cancelable bool
	// pinned says it is pinned to the stall plugin, which may be
	// restarting: INVALID is then a correct outcome.
	pinned bool
}

// chaosBatch is a batch-API submission kept allocated until the end, with
// the terminal state of each task as first seen.
type chaosBatch struct {
	id     host.BatchID
	states []host.State
}

// chaosRun is the state the workers share.
type chaosRun struct {
	t       *testing.T
	e       *host.Engine
	b       *peer
	seg     host.Segment
	remote  uint64 // the peer buffer's address
	local   []byte // every span, one after another
	pattern []byte // the peer's read region
	inverse []byte // ^pattern: what a read destination holds before the read

	askMu sync.Mutex // one question to the peer at a time

	issued atomic.Int64 // tasks handed out to workers
	failed atomic.Bool  // stop early after a failure

	mu       sync.Mutex
	spaces   []*chaosSpace
	batches  []chaosBatch
	states   map[host.State]int
	byMode   map[string]int
	stallTO  int // stall tasks that ended TIMEOUT
	stallAll int
}

func (r *chaosRun) errorf(format string, args ...any) {
	r.failed.Store(true)
	r.t.Errorf(format, args...)
}

// ask is peer.ask for the workers: it reports instead of failing.
func (r *chaosRun) ask(format string, args ...any) (string, error) {
	r.askMu.Lock()
	defer r.askMu.Unlock()
	fmt.Fprintf(r.b.in, format+"\n", args...)
	if !r.b.out.Scan() {
		return "", errors.New("peer engine gone")
	}
	s := r.b.out.Text()
	if strings.HasPrefix(s, "error") {
		return "", fmt.Errorf("peer: %s", s)
	}
	return s, nil
}

// chaosSpace is one worker's span and the ranges of it that must not be
// used again.
type chaosSpace struct {
	idx   int
	local []byte
	next  int
	// quarantine holds ranges of tasks that ended without completing
	// (TIMEOUT, CANCELED, FAILED): a plugin may still write them, here or
	// on the peer, so no later task may use them and be judged by them.
	quarantine [][2]int
	held       int
	// reused holds the local ranges of tasks that ended without
	// completing, which the application overwrote with its own bytes
	// once the task had ended: no plugin may touch them afterwards.
	reused []chaosReuse
}

// chaosReuse is a local range the application took back after its task
// ended, and what it wrote there.
type chaosReuse struct {
	off  int
	mark []byte
	what string
}

// alloc returns the offset of n free bytes, or -1 when quarantined ranges
// leave no room.
func (s *chaosSpace) alloc(n int) int {
	for range 2*len(s.quarantine) + 4 {
		if s.next+n > len(s.local) {
			s.next = 0
		}
		p, blocked := s.next, -1
		for _, q := range s.quarantine {
			if p < q[1] && q[0] < p+n {
				blocked = q[1]
				break
			}
		}
		if blocked < 0 {
			s.next = p + n
			return p
		}
		s.next = blocked
	}
	return -1
}

// space returns the span of worker w (the stall driver's: chaosWorkers),
// kept for the run's end.
func (r *chaosRun) space(w int) *chaosSpace {
	sp := &chaosSpace{idx: w, local: r.local[w*chaosSpan : (w+1)*chaosSpan]}
	r.mu.Lock()
	r.spaces = append(r.spaces, sp)
	r.mu.Unlock()
	return sp
}

func (s *chaosSpace) hold(off, n int) {
	s.quarantine = append(s.quarantine, [2]int{off, off + n})
	s.held += n
}

func chaosTasks() int {
	if v := os.Getenv("FERRY_CHAOS_TASKS"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			return n
		}
	}
	return chaosDefaultTasks
}

func chaosSeed() uint64 {
	if v := os.Getenv("FERRY_CHAOS_SEED"); v != "" {
		if n, err := strconv.ParseUint(v, 10, 64); err == nil {
			return n
		}
	}
	return uint64(time.Now().UnixNano())
}

// startChaos starts the chaos engine <name>-a (with opts, logging errors
// only) and its peer <name>-b in another process, which exposes the read
// pattern and then a span for each worker and the stall driver, and
// returns the run over them, its local side registered.
func startChaos(t *testing.T, ctx context.Context, name string, crashAfter int, opts ...host.Option) *chaosRun {
	t.Helper()
	return startChaosWith(t, ctx, name, crashAfter, "", opts...)
}

// startChaosWith is startChaos with more HCL (a qos block) in the
// initiator's configuration.
func startChaosWith(t *testing.T, ctx context.Context, name string, crashAfter int, extra string, opts ...host.Option) *chaosRun {
	t.Helper()
	opts = append(opts, host.WithLogger(hclog.New(&hclog.LoggerOptions{Name: "ferry", Level: hclog.Error, Output: os.Stderr})))
	e := hclEngine(t, ctx, chaosConfig(name+"-a", true, crashAfter)+extra, name+"-a.hcl", opts...)
	file := filepath.Join(t.TempDir(), name+"-b.hcl")
	if err := os.WriteFile(file, []byte(withRunSecret(chaosConfig(name+"-b", false, 0))), 0o600); err != nil {
		t.Fatal(err)
	}
	spans := chaosWorkers + 1 // the last is the stall driver's
	b := startPeer(t, "--config", file, "--name", name+"-b", "--metastore", e.MetastoreURL(),
		"--expose", fmt.Sprint(chaosReadSpan+spans*chaosSpan), "--pattern", fmt.Sprint(chaosPatternSeed))
	seg, err := e.OpenSegment(ctx, name+"-b")
	if err != nil {
		t.Fatal(err)
	}
	r := &chaosRun{
		t: t, e: e, b: b, seg: seg, remote: b.Ready.Buffers[0].Base, local: localBuffer(t, ctx, e, spans*chaosSpan),
		pattern: pattern(chaosReadSpan, 0, chaosPatternSeed),
		states:  map[host.State]int{}, byMode: map[string]int{},
	}
	r.inverse = make([]byte, len(r.pattern))
	for i, c := range r.pattern {
		r.inverse[i] = ^c
	}
	return r
}

// drive runs n transfers over chaosWorkers workers, and the stall driver
// beside them, and returns when all of them have.
func (r *chaosRun) drive(ctx context.Context, n int, seed uint64) {
	var wg sync.WaitGroup
	for w := range chaosWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.worker(ctx, w, n, seed)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.stallDriver(ctx, seed)
	}()
	wg.Wait()
	// Every buffer the application took back after its task ended is
	// as it left it, the whole run later.
	r.mu.Lock()
	spaces := r.spaces
	r.mu.Unlock()
	for _, sp := range spaces {
		r.checkReused(sp)
	}
}

// TestChaos runs many random transfers (reads and writes of 1 B to 256 KiB
// at random offsets, through Transfer and through the batch API, some with
// deadlines, some canceled) while the fault plugin drops, corrupts, delays
// and crashes under them, and a second fault plugin stalls and is killed.
// Some batches cancel single tasks (CancelTask) and leave the others to
// run. It checks that every task ends in exactly one terminal state that
// its op allows (CANCELED only for a task that was canceled), that no
// batch task changes state once terminal, that every COMPLETED task's
// bytes are right at their destination, that the local buffer of every
// task that ended otherwise, which the application overwrites at once,
// is never touched again (a plugin still writing it would show by the
// run's end), that every fault
// kind happened, that the run ends in bounded time, and that closing the
// engine leaves no goroutine behind.
//
// FERRY_CHAOS_TASKS sets the number of transfers (default 10,000);
// FERRY_CHAOS_SEED replays a run's choices.
func TestChaos(t *testing.T) { runChaos(t, "chaos", "") }

// chaosQoS is the qos block of TestChaosAdmission: budgets small enough
// that the workers' tasks are held back and dispatched from the queue
// (and canceled, timed out and failed over from there), with promotion.
const chaosQoS = `
qos {
  inflight_requests = 12
  promotion         = "5ms"
  class "low" {
    inflight_requests = 2
  }
  class "medium" {
    inflight_bytes = "512KiB"
  }
}
`

// TestChaosAdmission is TestChaos with the qos block's admission queue
// on: every task still ends exactly once, held ones included.
func TestChaosAdmission(t *testing.T) {
	runChaos(t, "chaosq", chaosQoS)
}

func runChaos(t *testing.T, name, extra string) {
	leaks := goleak.IgnoreCurrent()
	n := chaosTasks()
	seed := chaosSeed()
	// Several crashes over the run, whatever its length: every run of
	// the plugin numbers descriptors from 0 and crashes at crashAfter.
	crashAfter := max(100, n/8)
	t.Logf("chaos: %d tasks, %d workers, seed %d (FERRY_CHAOS_SEED=%d replays it), fault plugin crashes at descriptor %d of each run", n, chaosWorkers, seed, seed, crashAfter)

	ctx, cancel := context.WithTimeout(context.Background(), chaosBound)
	defer cancel()
	// The audit stage sees every task the run submits, each once,
	// whichever way it went on (held and resumed, failed over).
	st := audit.New()
	r := startChaosWith(t, ctx, name, crashAfter, extra, host.WithStage(st))
	e := r.e
	for _, want := range []string{"fault", "stall", "tcp"} {
		if !slices.Contains(r.seg.Transports, want) {
			t.Fatalf("segment offers %v, want fault, stall and tcp", r.seg.Transports)
		}
	}

	mon := startChaosMonitor(e)
	start := time.Now()
	r.drive(ctx, n, seed)
	elapsed := time.Since(start)
	counters := mon.stop()
	if ctx.Err() != nil {
		t.Fatalf("the chaos run did not end within %v", chaosBound)
	}
	t.Logf("chaos: %d tasks in %v; states %v; ops %v; stall tasks %d (%d TIMEOUT)", n, elapsed.Round(time.Millisecond), r.states, r.byMode, r.stallAll, r.stallTO)
	t.Logf("chaos: fault counters over all runs %v", counters)
	if r.failed.Load() {
		t.FailNow()
	}

	// Every fault kind happened.
	for _, k := range []string{"fault/dropped", "fault/corrupted", "fault/delayed", "stall/stalled"} {
		if counters[k] == 0 {
			t.Errorf("no %s over the run: the fault never fired", k)
		}
	}
	fault, stall := pluginStatus(e, "fault"), pluginStatus(e, "stall")
	t.Logf("chaos: restarts: fault %d (crashes), stall %d (kills)", fault.Restarts, stall.Restarts)
	if fault.Restarts < 2 {
		t.Errorf("fault plugin restarted %d times; its crash fault should have fired at least twice", fault.Restarts)
	}
	if stall.Restarts < chaosStallCycles {
		t.Errorf("stall plugin restarted %d times, want %d (one per kill)", stall.Restarts, chaosStallCycles)
	}
	if r.stallTO < chaosStallCycles*chaosStallTimeouts {
		t.Errorf("%d stall tasks ended TIMEOUT, want at least %d", r.stallTO, chaosStallCycles*chaosStallTimeouts)
	}
	total := 0
	for _, c := range r.states {
		total += c
	}
	if total != n {
		t.Errorf("%d worker tasks accounted for, want %d", total, n)
	}
	if r.states[host.StateCompleted] < n/2 {
		t.Errorf("only %d of %d tasks completed: the faults are rare, most should", r.states[host.StateCompleted], n)
	}
	if r.states[host.StateCanceled] == 0 || r.states[host.StateTimeout] == 0 {
		t.Errorf("no CANCELED or no TIMEOUT task among %v: the run did not exercise them", r.states)
	}

	// No batch task changed state after it was first seen terminal, late
	// completions of stalled, delayed and crashed slices included.
	for _, cb := range r.batches {
		bs, err := e.BatchStatus(cb.id)
		if err != nil {
			t.Fatal(err)
		}
		completed := 0
		for i, first := range cb.states {
			ts, err := e.TaskStatus(cb.id, i)
			if err != nil {
				t.Fatal(err)
			}
			if ts.State != first {
				t.Errorf("batch task %d was %v, is now %v", i, first, ts.State)
			}
			if first == host.StateCompleted {
				completed++
			}
		}
		if bs.Pending != 0 || bs.Tasks != len(cb.states) || bs.Completed != completed || bs.Failed != bs.Tasks-completed {
			t.Errorf("batch status %+v now; its tasks were %v", bs, cb.states)
		}
	}
	for _, cb := range r.batches {
		if err := e.FreeBatch(cb.id); err != nil {
			t.Error(err)
		}
	}
	// Nothing wrote the read region.
	if got, want := r.b.ask(t, "sha256 0 %d", chaosReadSpan), sum(r.pattern); got != want {
		t.Errorf("the peer's read region changed: sha256 %s, want %s", got, want)
	}

	passed, twice := st.Counts()
	t.Logf("chaos: %d tasks passed the audit stage", passed)
	if len(twice) != 0 {
		t.Errorf("%d tasks passed the audit stage more than once, the first %+v", len(twice), twice[0])
	}
	if extra == "" && passed != n+r.stallAll {
		t.Errorf("%d tasks passed the audit stage, want the run's %d and its %d stall tasks, each once", passed, n, r.stallAll)
	}
	if held := int(quick(e).QoS.Dropped); passed+held < n {
		t.Errorf("%d tasks passed the audit stage, %d ended held: want at least the run's %d", passed, held, n)
	}

	if q := quick(e).QoS; q.On {
		t.Logf("chaos: admission held %d tasks back over the run (%d dropped after they ended held); %d held now", q.HeldTotal, q.Dropped, q.Held)
		if q.HeldTotal == 0 {
			t.Error("admission held no task back: the qos block did not exercise the queue")
		}
		if q.Held != 0 {
			t.Errorf("%d tasks still held after every batch was freed", q.Held)
		}
	}
	if err := e.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if err := goleak.Find(leaks, goleak.IgnoreTopFunction("github.com/hashicorp/go-plugin.(*Client).logStderr")); err != nil {
		t.Errorf("goroutines left after the engine closed: %v", err)
	}
}

// chaosMode is how an op submits its tasks and what may end them early.
type chaosMode struct {
	name     string
	transfer bool // Transfer; else AllocateBatch, Submit, Wait
	cancel   bool // Transfer: its ctx is canceled after a moment; batch: Cancel right after Submit
	// cancelTask: batch, CancelTask on some of its tasks right after
	// Submit; the others must not notice.
	cancelTask bool
	waitFor    time.Duration
}

func pickMode(rng *rand.Rand) chaosMode {
	switch x := rng.Float64(); {
	case x < 0.45:
		return chaosMode{name: "transfer", transfer: true}
	case x < 0.50:
		return chaosMode{name: "transfer+cancel", transfer: true, cancel: true}
	case x < 0.90:
		return chaosMode{name: "batch"}
	case x < 0.95:
		return chaosMode{name: "batch+cancel-task", cancelTask: true}
	case x < 0.975:
		return chaosMode{name: "batch+cancel", cancel: true}
	default:
		return chaosMode{name: "batch+wait-timeout", waitFor: time.Duration(1+rng.IntN(20)) * time.Millisecond}
	}
}

// chaosSize is log-uniform in [1, chaosMaxSize], so that every size class
// from single bytes to the largest is well represented.
func chaosSize(rng *rand.Rand) int {
	return min(chaosMaxSize, max(1, int(math.Exp(rng.Float64()*math.Log(chaosMaxSize+1)))))
}

// worker runs ops of 1 to chaosMaxBatch tasks until n tasks were handed
// out in all.
func (r *chaosRun) worker(ctx context.Context, w, n int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, uint64(w)))
	fill := rand.NewChaCha8([32]byte{byte(w), byte(seed), byte(seed >> 8), byte(seed >> 16)})
	sp := r.space(w)
	for !r.failed.Load() && ctx.Err() == nil {
		k := 1 + rng.IntN(chaosMaxBatch)
		end := int(r.issued.Add(int64(k)))
		if end-k >= n {
			return
		}
		k = min(k, n-(end-k))
		mode := pickMode(rng)
		tasks := make([]chaosTask, k)
		for i := range tasks {
			tk := &tasks[i]
			tk.n = chaosSize(rng)
			tk.timed = mode.waitFor > 0
			tk.cancelable = mode.cancel
			if rng.IntN(100) < 15 {
				tk.req.Deadline = time.Now().Add(time.Duration(1+rng.IntN(100)) * time.Millisecond)
				tk.timed = true
			}
			tk.req.Priority = host.Priority(rng.IntN(3))
			if !r.place(sp, tk, rng.IntN(2) == 0, rng, fill) {
				return
			}
		}
		r.run(ctx, sp, mode, tasks, rng)
	}
}

// place allocates tk's range in sp and prepares its bytes: a write's
// source gets fresh random bytes, a read's destination the inverse of
// what the read must bring.
func (r *chaosRun) place(sp *chaosSpace, tk *chaosTask, read bool, rng *rand.Rand, fill *rand.ChaCha8) bool {
	tk.off = sp.alloc(tk.n)
	if tk.off < 0 {
		r.errorf("worker %d: quarantined ranges (%d bytes in %d ranges) leave no room in its %d-byte span; raise chaosSpan", sp.idx, sp.held, len(sp.quarantine), chaosSpan)
		return false
	}
	buf := sp.local[tk.off : tk.off+tk.n]
	tk.req.Local, tk.req.Segment = buf, r.seg.ID
	if read {
		tk.roff = rng.IntN(chaosReadSpan - tk.n + 1)
		tk.req.Op, tk.req.Remote = host.Read, r.remote+uint64(tk.roff)
		copy(buf, r.inverse[tk.roff:tk.roff+tk.n])
	} else {
		tk.req.Op, tk.req.Remote = host.Write, r.remote+uint64(r.writeOffset(sp, tk))
		fill.Read(buf)
	}
	return true
}

// writeOffset is the peer buffer offset a write of tk goes to.
func (r *chaosRun) writeOffset(sp *chaosSpace, tk *chaosTask) int {
	return chaosReadSpan + sp.idx*chaosSpan + tk.off
}

// run submits one op's tasks as mode says, then checks and records each
// task's end. It returns the tasks' states.
func (r *chaosRun) run(ctx context.Context, sp *chaosSpace, mode chaosMode, tasks []chaosTask, rng *rand.Rand) []host.State {
	reqs := make([]host.Request, len(tasks))
	for i := range tasks {
		reqs[i] = tasks[i].req
	}
	states := make([]host.State, len(tasks))
	errs := make([]error, len(tasks))
	if mode.transfer {
		tctx := ctx
		if mode.cancel {
			c, cancel := context.WithCancel(ctx)
			defer cancel()
			stop := time.AfterFunc(time.Duration(rng.IntN(2000))*time.Microsecond, cancel)
			defer stop.Stop()
			tctx = c
		}
		err := r.e.Transfer(tctx, reqs...)
		if !r.transferOutcome(tctx, err, states, errs) {
			return nil
		}
	} else {
		id, err := r.e.AllocateBatch(len(reqs))
		if err != nil {
			r.errorf("allocate batch: %v", err)
			return nil
		}
		if err := r.e.Submit(id, reqs...); err != nil {
			r.errorf("submit: %v", err)
			return nil
		}
		if mode.cancel {
			r.e.Cancel(id)
		}
		if mode.cancelTask {
			for i := range tasks {
				if rng.IntN(2) == 0 {
					tasks[i].cancelable = true
					if err := r.e.CancelTask(id, i); err != nil {
						r.errorf("cancel task %d of %d: %v", i, len(tasks), err)
					}
				}
			}
		}
		wctx := ctx
		if mode.waitFor > 0 {
			c, cancel := context.WithTimeout(ctx, mode.waitFor)
			defer cancel()
			wctx = c
		}
		if werr := r.e.Wait(wctx, id); werr != nil && (wctx.Err() == nil || !errors.Is(werr, wctx.Err())) {
			r.errorf("wait: %v (its context: %v)", werr, wctx.Err())
		}
		bs, err := r.e.BatchStatus(id)
		if err != nil || bs.Pending != 0 || bs.Tasks != len(reqs) || bs.Completed+bs.Failed != bs.Tasks {
			r.errorf("after Wait: batch status %+v, %v; want %d tasks, none pending", bs, err, len(reqs))
		}
		completed := 0
		for i := range tasks {
			ts, err := r.e.TaskStatus(id, i)
			if err != nil {
				r.errorf("task status %d: %v", i, err)
				return nil
			}
			states[i], errs[i] = ts.State, ts.Err
			switch {
			case ts.State == host.StateCompleted && (ts.Bytes != uint64(tasks[i].n) || ts.Err != nil):
				r.errorf("COMPLETED batch task reports %d of %d bytes, err %v", ts.Bytes, tasks[i].n, ts.Err)
			case ts.State == host.StateCompleted:
				completed++
			}
		}
		if bs.Completed != completed {
			r.errorf("batch status says %d completed, its tasks %d", bs.Completed, completed)
		}
		r.mu.Lock()
		r.batches = append(r.batches, chaosBatch{id: id, states: slices.Clone(states)})
		r.mu.Unlock()
	}
	for i := range tasks {
		r.check(sp, &tasks[i], states[i], errs[i], mode)
	}
	r.mu.Lock()
	r.byMode[mode.name]++
	if !tasks[0].pinned {
		for _, s := range states {
			r.states[s]++
		}
	}
	r.mu.Unlock()
	return states
}

// transferOutcome fills each task's state from Transfer's error: nil for
// all COMPLETED, else one TransferError per task that did not complete,
// plus ctx's error when ctx ended.
func (r *chaosRun) transferOutcome(ctx context.Context, err error, states []host.State, errs []error) bool {
	for i := range states {
		states[i] = host.StateCompleted
	}
	if err == nil {
		return true
	}
	list := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	}
	seen := make([]bool, len(states))
	found := false
	for _, e := range list {
		var te *host.TransferError
		if !errors.As(e, &te) {
			if ctx.Err() == nil || !errors.Is(e, ctx.Err()) {
				r.errorf("Transfer returned an error that is no TransferError: %v", e)
				return false
			}
			continue
		}
		found = true
		if te.Task < 0 || te.Task >= len(states) || seen[te.Task] {
			r.errorf("Transfer reported task %d twice or out of range: %v", te.Task, err)
			return false
		}
		seen[te.Task] = true
		if !te.State.Terminal() || te.State == host.StateCompleted {
			r.errorf("Transfer reported task %d in state %v: %v", te.Task, te.State, te)
			return false
		}
		states[te.Task], errs[te.Task] = te.State, te.Err
	}
	if !found {
		r.errorf("Transfer failed without saying which task: %v", err)
		return false
	}
	return true
}

// check judges one task's end: a state its op allows, with the matching
// error, and right bytes when COMPLETED. A task that did not complete has
// its range quarantined.
func (r *chaosRun) check(sp *chaosSpace, tk *chaosTask, s host.State, err error, mode chaosMode) {
	what := func() string {
		return fmt.Sprintf("%s task (%s) of %d bytes at local %d", tk.req.Op, mode.name, tk.n, tk.off)
	}
	ok := true
	switch s {
	case host.StateCompleted:
		r.verify(sp, tk, what)
	case host.StateFailed:
		ok = errors.Is(err, host.ErrPluginFailed) || errors.Is(err, host.ErrTransportUnavailable)
	case host.StateTimeout:
		ok = tk.timed && errors.Is(err, host.ErrDeadlineExceeded)
	case host.StateCanceled:
		ok = tk.cancelable && errors.Is(err, host.ErrCanceled)
	case host.StateInvalid:
		ok = tk.pinned && errors.Is(err, host.ErrTransportUnavailable)
	default:
		ok = false
	}
	if !ok {
		r.errorf("%s ended %v with %v; its op does not allow that", what(), s, err)
	}
	if s != host.StateCompleted && s != host.StateInvalid {
		// The remote range stays quarantined: a write that ended so may
		// have partly landed. The local one the application reuses at
		// once: "ended" means no plugin touches it any more.
		sp.hold(tk.off, tk.n)
		sp.reuse(tk.off, tk.n, fmt.Sprintf("%s, ended %v", what(), s))
	}
}

// reuse overwrites local range [off, off+n) of sp, as an application
// does with a buffer whose task ended, and remembers what it wrote.
func (s *chaosSpace) reuse(off, n int, what string) {
	mark := make([]byte, n)
	for i := range mark {
		mark[i] = byte(off+i)*7 + 0x5a
	}
	copy(s.local[off:off+n], mark)
	s.reused = append(s.reused, chaosReuse{off: off, mark: mark, what: what})
}

// checkReused reports every reused range of sp whose bytes changed after
// the application wrote them: a plugin touched a buffer after its task
// was reported ended.
func (r *chaosRun) checkReused(sp *chaosSpace) {
	bad := 0
	for _, u := range sp.reused {
		got := sp.local[u.off : u.off+len(u.mark)]
		if bytes.Equal(got, u.mark) {
			continue
		}
		changed := 0
		for i := range got {
			if got[i] != u.mark[i] {
				changed++
			}
		}
		if bad++; bad <= 5 {
			r.errorf("worker %d: %s: %d of its %d bytes changed after the task ended and the application reused them", sp.idx, u.what, changed, len(got))
		}
	}
	if bad > 5 {
		r.errorf("worker %d: %d reused ranges changed in all", sp.idx, bad)
	}
}

// verify checks a COMPLETED task's destination: a read's local bytes
// against the peer's pattern, a write's remote bytes (hashed by the peer)
// against its source.
func (r *chaosRun) verify(sp *chaosSpace, tk *chaosTask, what func() string) {
	if tk.req.Op == host.Read {
		if !bytes.Equal(tk.req.Local, r.pattern[tk.roff:tk.roff+tk.n]) {
			r.errorf("%s from remote %d: COMPLETED but its bytes differ from the peer's", what(), tk.roff)
		}
		return
	}
	got, err := r.ask("sha256 %d %d", r.writeOffset(sp, tk), tk.n)
	if err != nil {
		r.errorf("%s: %v", what(), err)
		return
	}
	if want := sum(tk.req.Local); got != want {
		r.errorf("%s to remote %d: COMPLETED but the peer has sha256 %s, sent %s", what(), r.writeOffset(sp, tk), got, want)
	}
}

// stallDriver sends single tasks pinned to the stall plugin, each with a
// deadline. Once the plugin has stalled and chaosStallTimeouts of them
// ended TIMEOUT, it kills the plugin (the supervision a stalled plugin
// needs), waits for its restart and goes on, for chaosStallCycles cycles.
func (r *chaosRun) stallDriver(ctx context.Context, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 1<<32))
	fill := rand.NewChaCha8([32]byte{0xff, byte(seed)})
	sp := r.space(chaosWorkers)
	redo := 0 // cycles whose timeouts all came before the stall
	for cycle := 0; cycle < chaosStallCycles; cycle++ {
		before := pluginStatus(r.e, "stall")
		timeouts, sent := 0, 0
		for timeouts < chaosStallTimeouts {
			if r.failed.Load() || ctx.Err() != nil {
				return
			}
			if sent++; sent > 10*chaosStallAfter {
				r.errorf("stall cycle %d: %d tasks through the stall plugin and it did not stall (it stalls after %d)", cycle, sent, chaosStallAfter)
				return
			}
			tk := chaosTask{n: chaosSize(rng), timed: true, pinned: true}
			tk.req.Transport, tk.req.Deadline = "stall", time.Now().Add(chaosStallDeadline)
			if !r.place(sp, &tk, rng.IntN(2) == 0, rng, fill) {
				return
			}
			mode := chaosMode{name: "stall-transfer", transfer: true}
			if sent%2 == 0 {
				mode = chaosMode{name: "stall-batch"}
			}
			states := r.run(ctx, sp, mode, []chaosTask{tk}, rng)
			if states == nil {
				return
			}
			r.mu.Lock()
			r.stallAll++
			if states[0] == host.StateTimeout {
				r.stallTO++
				timeouts++
			}
			r.mu.Unlock()
		}
		st := pluginStatus(r.e, "stall")
		switch {
		case st.Restarts > before.Restarts || st.Stalls > before.Stalls:
			// Something else restarted the plugin already, or is
			// restarting it: the engine's own supervision, which kills
			// a plugin that holds ended tasks' slices past end_grace.
		case st.Counters["stalled"] == 0 && st.Counters["ops_timed_out"] >= uint64(timeouts) && redo < chaosStallCycles:
			// On a starved machine a task's deadline can pass before
			// the plugin even looks at it: the plugin ends it TIMEOUT
			// itself (ops_timed_out) and has not stalled yet. That is
			// no stall; run the cycle again.
			redo++
			cycle--
			continue
		case st.Counters["stalled"] == 0:
			r.errorf("stall cycle %d: %d tasks ended TIMEOUT on the stall plugin but it reports nothing stalled: %+v", cycle, timeouts, st)
			return
		default:
			pid := host.PluginPID(r.e, "stall")
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				r.errorf("kill stalled plugin %d: %v", pid, err)
				return
			}
		}
		if _, err := waitPlugin(r.e, "stall", before.Restarts, 30*time.Second); err != nil {
			r.errorf("stall cycle %d: %v", cycle, err)
			return
		}
	}
}

// chaosMonitor samples the fault plugins' counters while the run goes
// on. Every run of a plugin starts its counters from zero, so it keeps
// the highest value seen per run and sums the runs.
type chaosMonitor struct {
	quit chan struct{}
	done chan struct{}
	max  map[string]uint64 // "plugin/counter/restarts"
}

var chaosCounters = []string{"dropped", "corrupted", "delayed", "stalled", "descriptors"}

func startChaosMonitor(e *host.Engine) *chaosMonitor {
	m := &chaosMonitor{quit: make(chan struct{}), done: make(chan struct{}), max: map[string]uint64{}}
	go func() {
		defer close(m.done)
		tick := time.NewTicker(25 * time.Millisecond)
		defer tick.Stop()
		for {
			m.sample(e)
			select {
			case <-m.quit:
				m.sample(e)
				return
			case <-tick.C:
			}
		}
	}()
	return m
}

func (m *chaosMonitor) sample(e *host.Engine) {
	for _, st := range e.Status(context.Background()).Plugins {
		if st.Name != "fault" && st.Name != "stall" {
			continue
		}
		for _, c := range chaosCounters {
			k := fmt.Sprintf("%s/%s/%d", st.Name, c, st.Restarts)
			m.max[k] = max(m.max[k], st.Counters[c])
		}
	}
}

// stop ends the sampling and returns "plugin/counter" summed over runs.
func (m *chaosMonitor) stop() map[string]uint64 {
	close(m.quit)
	<-m.done
	out := map[string]uint64{}
	for k, v := range m.max {
		k = k[:strings.LastIndexByte(k, '/')]
		out[k] += v
	}
	return out
}

package soak

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
)

// Fault kinds, as --faults names them.
const (
	KindKill             = "kill"              // kill -9 of a plugin, either side
	KindStop             = "stop"              // SIGSTOP of a plugin for StopFor, then SIGCONT
	KindRestartTarget    = "restart-target"    // kill -9 of the target engine, started again
	KindRestartMetastore = "restart-metastore" // kill -9 of `ferry metad`, started again
	KindSlowLink         = "slow-link"         // tc tbf on the veth (netns only)
	KindDownLink         = "down-link"         // the veth set down (netns only)
	KindUpgrade          = "upgrade"           // live upgrade of a plugin, either side, to a copy of its binary
)

// AllKinds lists every fault kind.
var AllKinds = []string{KindKill, KindStop, KindRestartTarget, KindRestartMetastore, KindSlowLink, KindDownLink, KindUpgrade}

// Options configure a run.
type Options struct {
	// Ferry is the ferry binary: the target engine is `Ferry run`, the
	// metastore `Ferry metad`. PluginDir is where the initiator finds its
	// plugins ("": beside Ferry).
	Ferry, PluginDir string
	Duration         time.Duration
	// Warmup is traffic without faults; the baseline is sampled at its end.
	Warmup time.Duration
	// GapMin and GapMax bound the random pause before each fault.
	GapMin, GapMax time.Duration
	// StopFor is how long a SIGSTOP fault keeps a plugin stopped; a
	// link fault keeps the link slow or down as long.
	StopFor time.Duration
	// MaxFaults bounds the faults injected; 0: only the gaps bound them.
	MaxFaults  int
	Kinds      []string
	Transports []string
	Seed       uint64
	Workers    int
	Span       int64 // remote (and local) bytes each worker owns
	MaxSize    int64 // largest request, a multiple of Block
	Deadline   time.Duration
	// ShortDeadlines is the share of write batches whose deadline is
	// 1-30 ms, so that they expire; Cancels the share that is canceled.
	ShortDeadlines, Cancels float64
	Supervise               config.Supervise
	Limits                  Thresholds
	// SlowRate is the tbf rate of a slow-link fault ("2mbit").
	SlowRate string
	// Netns runs the target in another network namespace over a veth
	// (set up by the caller, see NetnsSetup); nil: both on loopback.
	Netns *Netns
	// Series and Plot are where the CSV and PNG go ("" for none);
	// DumpDir where the watchdog writes goroutine stacks.
	Series, Plot, DumpDir string
	// LogArgs go to the target engine (--log-level ...); Logger is the
	// initiator's; Logs takes the children's stderr; Out the progress.
	LogArgs []string
	Logger  hclog.Logger
	Logs    io.Writer
	Out     io.Writer
}

// Netns is the two network namespaces of a --netns run: the soak runs in
// A, the target engine in B, joined by one veth pair.
type Netns struct {
	A, B         string
	AddrA, AddrB string // the veth addresses
	VethA        string // A's end, where link faults apply
}

// target is the target engine as the initiator reaches it; mu's write
// side is held while it is restarted.
type targetState struct {
	mu   sync.RWMutex
	down bool
	c    *child
	seg  host.SegmentID
	base uint64
}

type runner struct {
	o     Options
	e     *host.Engine
	model *Model
	tally *Tally
	wd    *watchdog
	tgt   targetState
	meta  *metad
	// upgrades numbers the upgrade faults; upgraded is the copy of the
	// binary each side's plugin ("target/tcp") was last upgraded to.
	upgrades int
	upgraded map[string]string
	start    time.Time
	cfgDir   string
	name     string
	local    []byte // per worker: Span bytes to write from, Span to read into
	stats    struct {
		writes, reads atomic.Uint64
	}
	samplesMu sync.Mutex
	samples   []Sample
	notes     []string
}

func (r *runner) since() time.Duration { return time.Since(r.start) }

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.o.Out, "[%7s] %s\n", fmtDur(r.since().Round(100*time.Millisecond)), fmt.Sprintf(format, args...))
}

// Run runs a soak as o says and returns its report.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	r := &runner{o: o, start: time.Now(), tally: NewTally()}
	r.model = NewModel(int64(o.Workers)*o.Span, o.Seed*0x9e3779b97f4a7c15|1)
	r.wd = newWatchdog(r)
	dir, err := os.MkdirTemp("", "ferry-soak-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	r.cfgDir = dir
	r.name = fmt.Sprintf("soak-target-%d", os.Getpid())

	// The metastore runs as a child of its own, so that it can be
	// restarted; both engines use it over HTTP.
	addrA := "127.0.0.1"
	if o.Netns != nil {
		addrA = o.Netns.AddrA
	}
	addr, err := freePort(addrA)
	if err != nil {
		return nil, err
	}
	r.meta = &metad{ferry: o.Ferry, addr: addr, logs: o.Logs}
	if err := r.meta.start(); err != nil {
		return nil, err
	}
	defer func() {
		if r.meta.c != nil {
			r.meta.c.stop(true)
		}
	}()

	cfg, err := config.Parse([]byte(r.engineHCL(fmt.Sprintf("soak-initiator-%d", os.Getpid()), addrA)), "soak-initiator.hcl")
	if err != nil {
		return nil, fmt.Errorf("initiator config: %w", err)
	}
	cfg.PluginDir = cmpOr(o.PluginDir, filepath.Dir(o.Ferry))
	r.e, err = host.New(ctx, cfg, host.WithLogger(o.Logger))
	if err != nil {
		return nil, fmt.Errorf("initiator engine: %w", err)
	}
	engineClosed := false
	defer func() {
		if !engineClosed {
			r.e.Close()
		}
	}()
	if r.tgt.c, r.tgt.seg, r.tgt.base, err = r.startTarget(ctx); err != nil {
		return nil, err
	}
	defer func() {
		if c := r.tgt.c; c != nil {
			c.stop(false)
		}
	}()
	total := int(int64(o.Workers) * o.Span * 2)
	if r.local, err = r.e.Allocate(total); err != nil {
		return nil, err
	}
	if _, err := r.e.Register(ctx, r.local, host.LocalOnly); err != nil {
		return nil, err
	}
	r.logf("initiator %s, target %s (pid %d), metastore %s; %d workers of %d MiB over %v",
		r.e.Name(), r.name, r.tgt.c.pid(), r.meta.url, o.Workers, o.Span>>20, o.Transports)

	runCtx, stopTraffic := context.WithCancel(ctx)
	defer stopTraffic()
	var wg sync.WaitGroup
	sampDone := make(chan struct{})
	go func() { defer close(sampDone); r.sampleLoop(runCtx) }()
	wdCtx, stopWatchdog := context.WithCancel(context.Background())
	defer stopWatchdog()
	go r.wd.loop(wdCtx)
	go r.wd.onSignal(wdCtx)
	for w := range o.Workers {
		wg.Add(1)
		go func() { defer wg.Done(); r.worker(runCtx, w) }()
	}

	end := r.start.Add(o.Duration)
	var baseline Sample
	if sleepCtx(ctx, time.Until(r.start.Add(o.Warmup))) {
		baseline = sampleSelf(r.since())
		r.logf("baseline: %d FDs, %d goroutines, RSS %.1f MiB", baseline.FDs, baseline.Goroutines, float64(baseline.RSS)/(1<<20))
		r.injectLoop(ctx, end)
	}
	sleepCtx(ctx, time.Until(end))
	final := sampleSelf(r.since())
	stopTraffic()
	joined := make(chan struct{})
	go func() { wg.Wait(); close(joined) }()
	select {
	case <-joined:
	case <-time.After(60 * time.Second):
		r.notes = append(r.notes, "some workers were still in a call 60s after the end (counted hung)")
	}
	stopWatchdog()
	<-sampDone

	rep := r.tally.Report(baseline, final, o.Limits)
	rep.Seed, rep.Duration, rep.Transports, rep.Kinds = int64(o.Seed), r.since(), o.Transports, o.Kinds
	rep.Notes = append(rep.Notes, r.notes...)
	rep.Stacks = r.wd.dumps()
	r.samplesMu.Lock()
	samples := slices.Clone(r.samples)
	r.samplesMu.Unlock()
	if o.Series != "" {
		if err := WriteSeries(o.Series, samples, rep.Faults); err != nil {
			return rep, fmt.Errorf("--series: %w", err)
		}
	}
	if o.Plot != "" {
		title := fmt.Sprintf("ferry soak: initiator over %v, %d faults (dashed)", rep.Duration.Round(time.Second), rep.Total.Faults)
		if err := WritePlot(o.Plot, title, samples, rep.Faults); err != nil {
			return rep, fmt.Errorf("--plot: %w", err)
		}
	}
	closed := make(chan struct{})
	go func() { r.e.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		rep.Notes = append(rep.Notes, "the initiator engine's Close did not return within 30s")
		rep.Failures = append(rep.Failures, "the initiator engine's Close hung")
	}
	engineClosed = true
	return rep, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (o *Options) check() error {
	switch {
	case o.Ferry == "":
		return errors.New("no ferry binary")
	case o.Workers < 1:
		return errors.New("--workers must be at least 1")
	case o.MaxSize < Block || o.MaxSize%Block != 0:
		return fmt.Errorf("--max-size %d: want a multiple of %d", o.MaxSize, Block)
	case o.Span < o.MaxSize || o.Span%Block != 0:
		return fmt.Errorf("--span %d: want a multiple of %d, at least --max-size", o.Span, Block)
	case o.GapMin <= 0 || o.GapMax < o.GapMin:
		return fmt.Errorf("--gap %v-%v: want 0 < min <= max", o.GapMin, o.GapMax)
	case len(o.Transports) == 0:
		return errors.New("no transport")
	}
	for _, k := range o.Kinds {
		if err := checkKind(k); err != nil {
			return err
		}
	}
	for _, t := range o.Transports {
		if t != "tcp" && t != "shm" {
			return fmt.Errorf("transport %q: want tcp or shm", t)
		}
	}
	return nil
}

// checkKind checks one --faults entry: a kind, or kill, stop or upgrade
// narrowed to a side and a plugin ("stop:target/tcp", "kill:initiator",
// "upgrade:target/shm").
func checkKind(k string) error {
	base, where, narrowed := strings.Cut(k, ":")
	if !slices.Contains(AllKinds, base) {
		return fmt.Errorf("fault kind %q: want one of %s", k, strings.Join(AllKinds, ", "))
	}
	if !narrowed {
		return nil
	}
	side, plugin, _ := strings.Cut(where, "/")
	if base != KindKill && base != KindStop && base != KindUpgrade || side != "initiator" && side != "target" || plugin != "" && plugin != "tcp" && plugin != "shm" {
		return fmt.Errorf("fault kind %q: only kill, stop and upgrade take a place, as kill:target or upgrade:initiator/tcp", k)
	}
	return nil
}

// engineHCL is the config of either engine: tcp listening on addr, shm,
// the metastore child, the supervise block, the default deadline.
func (r *runner) engineHCL(name, addr string) string {
	s := r.o.Supervise
	return fmt.Sprintf(`name = %q
strict = true
metastore {
  kind = "http"
  url  = %q
}
plugin "tcp" {
  config {
    listen = [%q]
  }
}
plugin "shm" {}
supervise {
  stall_after   = %q
  probe_timeout = %q
  interval      = %q
  end_grace     = %q
}
transfer {
  default_deadline = %q
}
`, name, r.meta.url, addr+":0", s.StallAfter.String(), s.ProbeTimeout.String(), s.Interval.String(), s.EndGrace.String(), r.o.Deadline.String())
}

// startTarget starts the target engine and opens its segment.
func (r *runner) startTarget(ctx context.Context) (*child, host.SegmentID, uint64, error) {
	addrB, ns := "127.0.0.1", ""
	if n := r.o.Netns; n != nil {
		addrB, ns = n.AddrB, n.B
	}
	path := filepath.Join(r.cfgDir, "target.hcl")
	if !fileExists(path) {
		if err := os.WriteFile(path, []byte(r.engineHCL(r.name, addrB)), 0o600); err != nil {
			return nil, 0, 0, err
		}
	}
	size := int64(r.o.Workers) * r.o.Span
	args := append([]string{r.o.Ferry, "run", "--control-stdin", "--config", path, "--expose", fmt.Sprint(size)}, r.o.LogArgs...)
	c, line, err := startChild(ns, r.o.Logs, args...)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("target engine: %w", err)
	}
	var rd ready
	if err := json.Unmarshal([]byte(line), &rd); err != nil || len(rd.Buffers) == 0 {
		c.kill()
		return nil, 0, 0, fmt.Errorf("target engine's ready line %q: %v", line, err)
	}
	// The descriptor of the new incarnation may reach the metastore a
	// moment after the ready line.
	var seg host.Segment
	deadline := time.Now().Add(30 * time.Second)
	for {
		seg, err = r.e.OpenSegment(ctx, r.name)
		if err == nil && seg.Incarnation == rd.Incarnation {
			break
		}
		if err == nil {
			r.e.CloseSegment(ctx, seg.ID)
			err = fmt.Errorf("segment %s is incarnation %d, want %d", r.name, seg.Incarnation, rd.Incarnation)
		}
		if time.Now().After(deadline) {
			c.kill()
			return nil, 0, 0, fmt.Errorf("open the target's segment: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return c, seg.ID, rd.Buffers[0].Base, nil
}

// sampleLoop samples the initiator every second.
func (r *runner) sampleLoop(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		s := sampleSelf(r.since())
		r.samplesMu.Lock()
		r.samples = append(r.samples, s)
		r.samplesMu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sleepCtx sleeps d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// task is one request of a worker's batch.
type task struct {
	off, n    int64 // in the worker's range, bytes
	transport string
	id        uint32 // writes: the write id
	epoch     uint64
	deadline  time.Time
}

// worker moves verified data in its own range of the remote buffer until
// ctx ends: write batches, each read back, and reads of random ranges.
func (r *runner) worker(ctx context.Context, w int) {
	rng := rand.New(rand.NewPCG(r.o.Seed, uint64(w)+1))
	for ctx.Err() == nil {
		if rng.Float64() < 0.25 {
			r.readRandom(ctx, w, rng)
			continue
		}
		tasks := r.writeBatch(ctx, w, rng)
		if len(tasks) > 0 {
			for i := range tasks {
				tasks[i].transport = r.o.Transports[rng.IntN(len(r.o.Transports))]
			}
			r.read(ctx, w, tasks)
		}
	}
}

// randSize picks a request size from Block to most, log-uniform.
func randSize(rng *rand.Rand, most int64) int64 {
	lo, hi := math.Log(Block), math.Log(float64(most))
	n := int64(math.Exp(lo+rng.Float64()*(hi-lo))) / Block * Block
	return min(max(n, Block), most)
}

// snapshot reads the target's segment and base for a batch and runs f
// (which calls Begin) under the read lock, so that a restart's Reset
// falls before or after the whole of it; false while the target is down.
func (r *runner) snapshot(f func(seg host.SegmentID, base uint64)) bool {
	r.tgt.mu.RLock()
	defer r.tgt.mu.RUnlock()
	if r.tgt.down {
		return false
	}
	f(r.tgt.seg, r.tgt.base)
	return true
}

func (r *runner) writeBatch(ctx context.Context, w int, rng *rand.Rand) []task {
	n := 1 + rng.IntN(4)
	slot := r.o.Span / int64(n) / Block * Block
	tasks := make([]task, n)
	now := time.Now()
	deadline := now.Add(r.o.Deadline)
	if rng.Float64() < r.o.ShortDeadlines {
		deadline = now.Add(time.Millisecond + time.Duration(rng.Int64N(int64(29*time.Millisecond))))
	}
	for i := range tasks {
		size := randSize(rng, min(r.o.MaxSize, slot))
		off := int64(i)*slot + rng.Int64N((slot-size)/Block+1)*Block
		tasks[i] = task{off: off, n: size, transport: r.o.Transports[rng.IntN(len(r.o.Transports))], deadline: deadline}
	}
	cancel := -1
	if rng.Float64() < r.o.Cancels {
		cancel = rng.IntN(n + 1) // n: the whole batch
	}
	cancelAfter := time.Duration(rng.Int64N(int64(5 * time.Millisecond)))
	ended, ok := r.write(w, tasks, deadline, cancel, cancelAfter)
	if !ok {
		sleepCtx(ctx, 100*time.Millisecond)
		return nil
	}
	// Write again, at once, what did not complete, as an application
	// retries a block: the retry races any bytes of the ended write that
	// are still on their way, which is when a stale write shows.
	var again []task
	for i, st := range ended {
		if st != "COMPLETED" {
			t := tasks[i]
			t.transport, t.deadline = r.o.Transports[rng.IntN(len(r.o.Transports))], time.Now().Add(r.o.Deadline)
			again = append(again, t)
		}
	}
	if len(again) > 0 && ctx.Err() == nil {
		r.write(w, again, again[0].deadline, -1, 0)
	}
	return tasks
}

// write writes tasks as one batch, each with a fresh write id, cancels
// task cancel (len(tasks): the whole batch; -1: none) after cancelAfter,
// and records how each ended; ok is false when the target was down.
func (r *runner) write(w int, tasks []task, deadline time.Time, cancel int, cancelAfter time.Duration) (ended []string, ok bool) {
	region := int64(w) * r.o.Span
	var reqs []host.Request
	ok = r.snapshot(func(seg host.SegmentID, base uint64) {
		for i := range tasks {
			t := &tasks[i]
			t.id, t.epoch = r.model.Begin(region+t.off, t.n)
			local := r.local[2*region+t.off : 2*region+t.off+t.n]
			Fill(local, r.model.Key(), t.id, uint64(region+t.off))
			reqs = append(reqs, host.Request{Op: host.Write, Local: local, Segment: seg, Remote: base + uint64(region+t.off),
				Transport: t.transport, Deadline: deadline})
		}
	})
	if !ok {
		return nil, false
	}
	ph, submitted := r.tally.Phase(), r.since()
	states, ok := r.runBatch(w, "write", reqs, deadline, func(id host.BatchID) {
		if cancel < 0 {
			return
		}
		time.Sleep(cancelAfter)
		if cancel == len(tasks) {
			r.e.Cancel(id)
		} else {
			r.e.CancelTask(id, cancel)
		}
	})
	for i, t := range tasks {
		st := "PENDING"
		if ok {
			st = states[i].State.String()
		}
		done := st == "COMPLETED"
		r.model.End(t.id, t.epoch, region+t.off, t.n, done)
		r.tally.Task(ph, st)
		r.failed(ph, states, i, ok)
		if done {
			r.tally.Completed(ph, submitted, r.since())
		}
		ended = append(ended, st)
	}
	r.stats.writes.Add(uint64(len(tasks)))
	return ended, true
}

// readRandom reads one or two random ranges of worker w's range.
func (r *runner) readRandom(ctx context.Context, w int, rng *rand.Rand) {
	n := 1 + rng.IntN(2)
	slot := r.o.Span / int64(n) / Block * Block
	tasks := make([]task, n)
	for i := range tasks {
		size := randSize(rng, min(r.o.MaxSize, slot))
		tasks[i] = task{off: int64(i)*slot + rng.Int64N((slot-size)/Block+1)*Block, n: size,
			transport: r.o.Transports[rng.IntN(len(r.o.Transports))]}
	}
	if !r.read(ctx, w, tasks) {
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

// read reads tasks' ranges back and judges what COMPLETED reads show;
// false when the target was down.
func (r *runner) read(ctx context.Context, w int, tasks []task) bool {
	region := int64(w) * r.o.Span
	deadline := time.Now().Add(r.o.Deadline)
	var reqs []host.Request
	var epoch uint64
	ok := r.snapshot(func(seg host.SegmentID, base uint64) {
		epoch = r.model.Epoch()
		for _, t := range tasks {
			local := r.local[2*region+r.o.Span+t.off : 2*region+r.o.Span+t.off+t.n]
			Poison(local)
			reqs = append(reqs, host.Request{Op: host.Read, Local: local, Segment: seg, Remote: base + uint64(region+t.off),
				Transport: t.transport, Deadline: deadline})
		}
	})
	if !ok {
		return false
	}
	ph := r.tally.Phase()
	states, ok := r.runBatch(w, "read", reqs, deadline, nil)
	for i, t := range tasks {
		st := "PENDING"
		if ok {
			st = states[i].State.String()
		}
		r.tally.Task(ph, st)
		r.failed(ph, states, i, ok)
		if st != "COMPLETED" {
			continue
		}
		v, judged := r.model.Check(epoch, region+t.off, reqs[i].Local)
		if !judged {
			continue
		}
		r.tally.Read(ph, v)
		if v.Wrong() > 0 {
			r.logf("WRONG BYTES: worker %d read %d bytes at %d over %s: %d an older write's, %d other; first: %s",
				w, t.n, region+t.off, t.transport, v.Older, v.Other, v.First)
		}
	}
	r.stats.reads.Add(uint64(len(tasks)))
	return true
}

// runBatch submits reqs as one batch, runs during (if any) beside, waits
// for it and frees it, every call under the watchdog. ok is false when a
// call failed or hung past rescue; the tasks' states are then unknown.
func (r *runner) runBatch(w int, what string, reqs []host.Request, deadline time.Time, during func(host.BatchID)) (states []host.TaskStatus, ok bool) {
	ph := r.tally.Phase()
	bound := time.Until(deadline) + 10*time.Second
	done := r.wd.begin(ph, fmt.Sprintf("worker %d: AllocateBatch", w), 10*time.Second)
	id, err := r.e.AllocateBatch(len(reqs))
	done()
	if err != nil {
		r.logf("worker %d: AllocateBatch: %v", w, err)
		return nil, false
	}
	done = r.wd.begin(ph, fmt.Sprintf("worker %d: Submit of a %s batch", w, what), bound)
	err = r.e.Submit(id, reqs...)
	done()
	if err != nil {
		r.logf("worker %d: Submit: %v", w, err)
		r.free(w, ph, id)
		return nil, false
	}
	if during != nil {
		during(id)
	}
	// Wait gets no deadline of its own: the tasks' deadlines must end
	// it, and the watchdog says when they do not. The long bound only
	// lets a hung run end.
	wctx, cancel := context.WithTimeout(context.Background(), bound+2*time.Minute)
	done = r.wd.begin(ph, fmt.Sprintf("worker %d: Wait of a %s batch of %d", w, what, len(reqs)), bound)
	err = r.e.Wait(wctx, id)
	done()
	cancel()
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		r.logf("worker %d: Wait: %v", w, err)
	}
	states = make([]host.TaskStatus, len(reqs))
	done = r.wd.begin(ph, fmt.Sprintf("worker %d: TaskStatusList", w), 10*time.Second)
	_, serr := r.e.TaskStatusList(id, 0, states)
	done()
	r.free(w, ph, id)
	return states, serr == nil && err == nil
}

// failed records the error of task i when it ended FAILED or INVALID.
func (r *runner) failed(ph int, states []host.TaskStatus, i int, ok bool) {
	if !ok || states[i].Err == nil {
		return
	}
	if st := states[i].State.String(); st == "FAILED" || st == "INVALID" {
		r.tally.Failed(ph, st, states[i].Err.Error())
	}
}

func (r *runner) free(w, ph int, id host.BatchID) {
	done := r.wd.begin(ph, fmt.Sprintf("worker %d: FreeBatch", w), r.o.Supervise.EndGrace+10*time.Second)
	r.e.FreeBatch(id)
	done()
}

// watchdog bounds every call: one past its bound is counted hung once,
// and when no call returns for 20s while some are in flight, every
// goroutine's stack is written to a file.
type watchdog struct {
	r       *runner
	mu      sync.Mutex
	next    int
	calls   map[int]*call
	last    time.Time
	dumped  bool
	written []string
}

type call struct {
	what  string
	start time.Time
	bound time.Duration
	ph    int
	hung  bool
}

// stallDump is how long no call may return, with calls in flight,
// before the stacks are dumped.
const stallDump = 20 * time.Second

func newWatchdog(r *runner) *watchdog {
	return &watchdog{r: r, calls: map[int]*call{}, last: time.Now()}
}

// begin starts watching a call; the function it returns ends it.
func (wd *watchdog) begin(ph int, what string, bound time.Duration) func() {
	wd.mu.Lock()
	k := wd.next
	wd.next++
	c := &call{what: what, start: time.Now(), bound: bound, ph: ph}
	wd.calls[k] = c
	wd.mu.Unlock()
	return func() {
		wd.mu.Lock()
		delete(wd.calls, k)
		wd.last, wd.dumped = time.Now(), false
		wd.mu.Unlock()
		if c.hung {
			wd.r.logf("HUNG call returned: %s after %v (bound %v)", c.what, time.Since(c.start).Round(time.Millisecond), c.bound.Round(time.Millisecond))
		}
	}
}

func (wd *watchdog) loop(ctx context.Context) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			wd.check()
		}
	}
}

func (wd *watchdog) check() {
	wd.mu.Lock()
	now := time.Now()
	var hung []*call
	for _, c := range wd.calls {
		if !c.hung && now.Sub(c.start) > c.bound {
			c.hung = true
			hung = append(hung, c)
		}
	}
	dump := len(wd.calls) > 0 && now.Sub(wd.last) > stallDump && !wd.dumped
	if dump {
		wd.dumped = true
	}
	inFlight := len(wd.calls)
	wd.mu.Unlock()
	for _, c := range hung {
		wd.r.tally.Hung(c.ph)
		wd.r.logf("HUNG: %s has run %v, past its bound %v", c.what, now.Sub(c.start).Round(time.Millisecond), c.bound.Round(time.Millisecond))
	}
	if dump {
		path, err := wd.dump(now)
		if err != nil {
			wd.r.logf("no call returned for %v (%d in flight); dump of the stacks failed: %v", stallDump, inFlight, err)
			return
		}
		wd.r.logf("no call returned for %v (%d in flight): goroutine stacks in %s", stallDump, inFlight, path)
	}
}

// dump writes every goroutine's stack to a file in DumpDir and returns
// its name.
func (wd *watchdog) dump(now time.Time) (string, error) {
	path := filepath.Join(cmpOr(wd.r.o.DumpDir, "."), fmt.Sprintf("ferry-soak-stacks-%d-%s.txt", os.Getpid(), now.Format("150405.000")))
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	err = pprof.Lookup("goroutine").WriteTo(f, 2)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	wd.mu.Lock()
	wd.written = append(wd.written, path)
	wd.mu.Unlock()
	return path, nil
}

// onSignal dumps the stacks whenever this process gets SIGUSR1, until
// ctx ends: an operator's look at a run that seems stuck.
func (wd *watchdog) onSignal(ctx context.Context) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	defer signal.Stop(ch)
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
			if path, err := wd.dump(time.Now()); err != nil {
				wd.r.logf("SIGUSR1: dump of the stacks failed: %v", err)
			} else {
				wd.r.logf("SIGUSR1: goroutine stacks in %s", path)
			}
			// And the heap, for a look at what RSS grows by (go tool
			// pprof -base an earlier one).
			heap := filepath.Join(cmpOr(wd.r.o.DumpDir, "."), fmt.Sprintf("ferry-soak-heap-%d-%s.pprof", os.Getpid(), time.Now().Format("150405.000")))
			if f, err := os.Create(heap); err == nil {
				runtime.GC()
				err = pprof.Lookup("heap").WriteTo(f, 0)
				f.Close()
				wd.r.logf("SIGUSR1: heap profile in %s (%v)", heap, err)
			}
		}
	}
}

func (wd *watchdog) dumps() []string {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	// Calls that never returned are hung too.
	now := time.Now()
	for _, c := range wd.calls {
		if !c.hung && now.Sub(c.start) > c.bound {
			c.hung = true
			wd.r.tally.Hung(c.ph)
		}
	}
	return slices.Clone(wd.written)
}

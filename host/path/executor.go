// Package path is the request path: the one stage sequence every task
// of an engine runs through, and the drivers around it (waiting, status,
// aborts, fencing). The decisions are the stage packages' (host/validate,
// host/admission, host/selector, host/slicer, host/credit, host/failover);
// this package runs them in order and carries a task's facts from one
// to the next. host.Engine is its public face and its wiring.
//
// The stages, in the order Executor.run takes them (stages.go):
//
//	validate  host/validate   known op, length, open segment, both ranges
//	admit     host/admission  now, later or never; with a qos block, the queue
//	route     host/selector   policy -> ordered transports
//	gate      host/fence      a write waits while its target's fence is unconfirmed
//	plan      host/slicer     slice size, slice count, rail mask
//	put       host/credit     receiver credit per slice, then the lane's ring
//	complete  host/progress   completions folded into task state (the reapers)
//	retry     host/failover   another rail, next transport, wait, fail
//	end       host/progress   one terminal state; the hook chain is told
//
// Every entry (Submit, a block submission, a QoS resume, a failover)
// calls run with the stage it starts from; none rebuilds the sequence.
//
// Locks: no lock is held across a stage boundary, a wait, or a plugin
// call. A goroutine that takes a task on from elsewhere (the QoS
// dispatcher, a failover) pins the task's batch (progress.Tracker.Pin)
// rather than hold a lock through dispatch. The lock order is in
// host/progress's package comment and ARCHITECTURE.md.
package path

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host/device"
	"github.com/ferrydev/ferry/host/failover"
	"github.com/ferrydev/ferry/host/fence"
	"github.com/ferrydev/ferry/host/loader"
	"github.com/ferrydev/ferry/host/localmem"
	"github.com/ferrydev/ferry/host/notify"
	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/host/rails"
	"github.com/ferrydev/ferry/host/remotes"
	"github.com/ferrydev/ferry/host/selector"
	"github.com/ferrydev/ferry/host/supervisor"
	"github.com/ferrydev/ferry/host/trace"
	"github.com/ferrydev/ferry/internal/cpuslice"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// ControlTimeout bounds one control call to a plugin.
const ControlTimeout = 10 * time.Second

// fenceTimeout bounds one fence request to a target engine (which
// waits for its plugin's answer).
const fenceTimeout = 2 * time.Second

// Deps is what an Executor is built on: the engine's configuration and
// identity, and the parts it shares with the engine (the tracker, the
// supervisor, the local memory and remote segment tables).
type Deps struct {
	Config      *config.Config
	Log         hclog.Logger
	Incarnation uint64
	MachineID   string
	Locked      bool // the callers' goroutines are locked to their threads (host.WithLockedCallers)
	Tracker     *progress.Tracker
	Supervisor  *supervisor.Set
	Mem         *localmem.Table
	Segs        *remotes.Table
	// Devices is the engine's device memory (host/device); requests on
	// it are routed to a transport that reaches it, or staged.
	Devices *device.Set
	Options Options
	// Recheck looks at a segment again after a plugin failed a task to
	// it, and says what it found in err (host's segments.go); Transfer
	// calls it once per segment (checked).
	Recheck func(ctx context.Context, rem *remotes.Handle, st ring.Status, err error, checked map[SegmentID]string) error
	// Reread reads a segment's descriptor again and applies it
	// (remotes.Directory.Reread): how a failover waiting for a target
	// that nothing watches learns that it moved (chase.go). Nil: never.
	Reread func(ctx context.Context, rem *remotes.Handle) (bool, error)
}

// Executor runs an engine's tasks through the request path. Methods are
// safe for concurrent use.
type Executor struct {
	cfg         *config.Config
	log         hclog.Logger
	name        string
	incarnation uint64
	machineID   string
	sliceSize   uint64
	// lockedCallers: the callers' goroutines are locked to their threads,
	// so a waiter's spin never hands its thread to the scheduler.
	lockedCallers bool

	plugins []*Plugin
	byName  map[string]*Plugin
	// lastRoute is the last route a Submit call chose (sharedRoute).
	lastRoute  atomic.Pointer[sharedRoute]
	supervisor *supervisor.Set
	sel        *selector.Selector // the policies, compiled; see route.go

	tracker *progress.Tracker
	path    requestPath  // the stages' listeners and the task records; see observe.go
	aborts  aborts       // ended tasks' slices to abort; see abort.go
	fences  *fence.Gates // targets whose writes wait for a fence; see fencing.go

	retries *failover.Runner[retryTask] // failovers (host/failover); see retry.go

	hc     *notify.Service // the control service, for peers' credit and fences; set by Serve
	recent recentFailures  // the latest failed attempts, for status
	trace  *trace.Recorder // nil without a trace block

	mem  *localmem.Table
	segs *remotes.Table

	closed atomic.Bool
	quit   chan struct{} // closed by Close: waits give up
	// sliced: Start held transfer.cpu_slice on the process's threads,
	// which Close releases (internal/cpuslice).
	sliced atomic.Bool
	wg     sync.WaitGroup // the goroutines the executor owns

	credit *creditState // receiver credit; nil when off (credit.go)
	stg    stagingState // staged requests and their pool (staged.go)
	stages []Stage      // the engine's added stages (Options.Stages), in order

	recheck func(ctx context.Context, rem *remotes.Handle, st ring.Status, err error, checked map[SegmentID]string) error
	reread  func(ctx context.Context, rem *remotes.Handle) (bool, error)
	chasing chasers // segments nothing watches, read again for a failover (chase.go)
}

// New builds the request path of an engine; its plugins are added with
// StartPlugin, and Start starts its goroutines once they are.
func New(d Deps) (*Executor, error) {
	cfg := d.Config
	e := &Executor{
		cfg: cfg, log: d.Log, name: cfg.Name, incarnation: d.Incarnation, machineID: d.MachineID,
		sliceSize: uint64(cfg.Transfer.SliceSize), lockedCallers: d.Locked,
		byName: make(map[string]*Plugin), supervisor: d.Supervisor, tracker: d.Tracker,
		mem: d.Mem, segs: d.Segs, quit: make(chan struct{}), recheck: d.Recheck, reread: d.Reread,
	}
	e.stg.devs = d.Devices
	if e.sliceSize == 0 {
		e.sliceSize = 1 << 20
	}
	e.fences = fence.New(fencePort{e}, fenceTimeout)
	e.retries = e.newRetries()
	// The tracker's hooks, in the order it calls them: failover (a
	// failed attempt), aborts (a held task), admission (grants given back
	// at a task's end, before the meter and the observer hear of it), the
	// meter and the observer, rails and credit (a lane's reaped
	// completions).
	e.tracker.Hook(progress.Hook{Failed: e.onFailure})
	e.tracker.Hook(progress.Hook{Held: e.onHold})
	e.aborts.wake = make(chan struct{}, 1)
	if err := e.wireQoS(); err != nil {
		return nil, err
	}
	e.wirePath(d.Options)
	e.credit = newCredit(e)
	e.tracker.Hook(e.reapedHook())
	return e, nil
}

// Start compiles the policies against the plugins started and starts
// the executor's goroutines (aborts, the qos dispatcher); Close ends
// them.
func (e *Executor) Start() error {
	sel, err := newSelector(e.cfg, e.plugins)
	if err != nil {
		return err
	}
	e.sel = sel
	e.holdCPUSlice()
	e.wg.Add(1)
	go e.runAborts()
	e.startQoS()
	if l := e.path.later; l != nil {
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			l.Run()
		}()
	}
	return nil
}

// Serve gives the executor the engine's control service (peers' credit
// and fences go through it) and starts the credit keeper.
func (e *Executor) Serve(hc *notify.Service) {
	e.hc = hc
	if e.credit != nil {
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.credit.keeper.Run()
		}()
	}
}

// Closing stops new work: Submit refuses, waits give up, failovers end.
// Close calls it before the plugins stop.
func (e *Executor) Closing() {
	if e.closed.Swap(true) {
		return
	}
	e.chasing.close()
	close(e.quit)
	e.fences.Stop() // writes waiting at a gate give up
	// Failovers in progress give up (they watch quit) or finish
	// submitting; none starts from here on.
	e.retries.Close()
}

// Close fails what is still pending on every plugin, saying the engine
// closed; the engine calls it once its plugins stopped taking work
// (supervisor Stop).
func (e *Executor) Close() {
	e.Closing()
	err := e.closeErr()
	for _, ps := range e.plugins {
		e.tracker.FailTransport(ps.idx, err)
	}
	if e.sliced.Swap(false) {
		cpuslice.Release()
	}
}

// holdCPUSlice asks Linux for transfer.cpu_slice on the process's
// threads, so that a waiter the plugin wakes runs at once on a core that
// another process keeps busy (internal/cpuslice). A kernel that cannot is
// said once, at info: the engine works as before.
func (e *Executor) holdCPUSlice() {
	d := e.cfg.Transfer.CPUSlice
	if d <= 0 {
		return
	}
	if err := cpuslice.Hold(d); err != nil {
		e.log.Info("threads keep the kernel's default time slice: on busy cores a woken waiter may wait out another process's slice",
			"transfer.cpu_slice", d, "error", err)
		return
	}
	e.sliced.Store(true)
	e.log.Debug("time slice held", "transfer.cpu_slice", cpuslice.Held())
}

// WaitClosed waits for the executor's goroutines, after Close and the
// supervisor's.
func (e *Executor) WaitClosed() { e.wg.Wait() }

// Closed reports whether Closing was called.
func (e *Executor) Closed() bool { return e.closed.Load() }

// Plugins returns the plugins in the order they were started (their
// indices).
func (e *Executor) Plugins() []*Plugin { return e.plugins }

// Plugin returns the plugin named name, nil for none.
func (e *Executor) Plugin(name string) *Plugin { return e.byName[name] }

// Plugin is one configured plugin as the request path sees it. Its life
// (runs, restarts, status) is the supervisor's; the executor keeps what
// it builds around each run (the rail set) and the names the request path
// reads.
type Plugin struct {
	idx  int32 // position in Executor.plugins
	name string
	sv   *supervisor.Plugin
	err  error                     // why it is not usable; set at start only
	cur  atomic.Pointer[pluginRun] // nil when it never started
	next atomic.Uint32
	// rails is the current run's rail set; a restart that probes the same
	// rails keeps it, and what it learnt.
	rails atomic.Pointer[rails.Set]
	// deadRun is the ID of the last run of a two-sided plugin that ended
	// (Down): a write of it that failover moves fences that run at its
	// target first (fencing.go).
	deadRun atomic.Uint64
}

// pluginRun is one run of a plugin process as the request path reads it:
// the supervisor's run, and the rail set built for it.
type pluginRun struct {
	sv       *supervisor.Run
	p        *loader.Plugin
	lanes    []*progress.Lane
	endpoint sdk.Endpoint
	rails    *rails.Set
}

func (ps *Plugin) run() *pluginRun { return ps.cur.Load() }

// Name is the plugin's configured name.
func (ps *Plugin) Name() string { return ps.name }

// Index is the plugin's position among the engine's plugins: a task's
// transport.
func (ps *Plugin) Index() int32 { return ps.idx }

// Err says why the plugin is not usable, nil when it started.
func (ps *Plugin) Err() error { return ps.err }

// Supervised is the supervisor's handle of the plugin.
func (ps *Plugin) Supervised() *supervisor.Plugin { return ps.sv }

// Rails is the current run's rail set, nil before one.
func (ps *Plugin) Rails() *rails.Set { return ps.rails.Load() }

// Lanes are the current run's lanes, nil when none runs.
func (ps *Plugin) Lanes() []*progress.Lane {
	if r := ps.run(); r != nil {
		return r.lanes
	}
	return nil
}

// Proc returns the current process, nil when the plugin never started.
func (ps *Plugin) Proc() *loader.Plugin { return ps.proc() }

// Retiring returns the processes of ps's runs that an upgrade replaced
// and that still run.
func (ps *Plugin) Retiring() []*loader.Plugin {
	var out []*loader.Plugin
	for _, r := range ps.sv.Retiring() {
		out = append(out, r.Proc)
	}
	return out
}

func (ps *Plugin) proc() *loader.Plugin {
	if r := ps.cur.Load(); r != nil {
		return r.p
	}
	return nil
}

// down reports whether its process exited and it is not back yet.
func (ps *Plugin) down() bool { return ps.sv.Down() }

// Usable reports whether it runs now.
func (ps *Plugin) Usable() bool { return ps.usable() }

func (ps *Plugin) usable() bool { return ps.err == nil && ps.cur.Load() != nil && !ps.sv.Down() }

// lane returns the lane of r a request of plugin ps goes on (pickLane).
func (r *pluginRun) lane(ps *Plugin) *progress.Lane { return pickLane(r.lanes, &ps.next) }

// pickLane returns the first of lanes with nothing in flight, or, when
// every one has work out, the next in turn (next counts the turns). A
// caller that waits for each request before it sends the next keeps to
// one lane, whose plugin goroutine is still spinning from the request
// before; callers that overlap spread over the lanes. Taken in turn, one
// caller's requests one at a time went each to a lane whose plugin
// goroutine had gone to sleep, or that still spun beside the one in use:
// with transfer.lanes = 2, 64 KiB shm writes one at a time ran at 0.4-0.6
// GB/s against 14-20 on one lane (p99 1.1 ms against 13-18 us, 3 context
// switches a request; a 2-vCPU guest).
func pickLane(lanes []*progress.Lane, next *atomic.Uint32) *progress.Lane {
	if len(lanes) == 1 {
		return lanes[0]
	}
	for _, l := range lanes {
		if l.InFlight() == 0 {
			return l
		}
	}
	return lanes[int(next.Add(1))%len(lanes)]
}

// remote returns the open segment handle id names, nil for none.
func (e *Executor) remote(id SegmentID) *remote { return e.segs.Get(uint32(id)) }

// lookupLocal finds the registered buffer holding [p, p+n) without
// locking or allocating.
func (e *Executor) lookupLocal(p, n uint64) (region uint32, off uint64, ok bool) {
	if region, off, ok = e.mem.Lookup(p, n); ok {
		return region, off, true
	}
	r, off, ok := e.stg.devs.Lookup(p, n) // device memory: its region ids are apart from host memory's
	return r.ID, off, ok
}

// SegmentID names an open remote segment (from host.Engine.OpenSegment).
type SegmentID uint32

type remote = remotes.Handle

func addr(b []byte) uintptr { return localmem.Addr(b) }

// closeErr is what a call on a closed engine returns.
func (e *Executor) closeErr() error { return fmt.Errorf("%w: engine %q closed", ErrClosed, e.name) }

// settleNotifies decides the SubmitWithNotify submissions of batch b
// whose tasks all ended; FreeBatch calls it before the batch can be
// reused (see notify.Service.Settle).
func (e *Executor) settleNotifies(b *progress.Batch) {
	if e.hc != nil {
		e.hc.Settle(b)
	}
}

// Quit is closed when the engine starts closing.
func (e *Executor) Quit() <-chan struct{} { return e.quit }

// Endpoint is the current run's endpoint, as the descriptor publishes
// it; zero when none runs.
func (ps *Plugin) Endpoint() sdk.Endpoint {
	if r := ps.run(); r != nil {
		return r.endpoint
	}
	return sdk.Endpoint{}
}

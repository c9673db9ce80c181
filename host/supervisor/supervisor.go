package supervisor

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/host/loader"
	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/sdk"
)

// ErrStopped is what a Hooks.Replay returns when the engine is closing:
// the new run is discarded and the plugin is not restarted again.
var ErrStopped = errors.New("supervisor: stopped")

// Config is what every run of every plugin in a Set is launched and
// watched with.
type Config struct {
	Lanes     int           // lanes (ring pairs) per run; 0 means 1
	RingDepth int           // descriptors per ring
	Spin      time.Duration // how long a lane spins before it sleeps
	SpinSmall time.Duration // see progress.Lane.SetSpinSmall
	// StreamPause is the lanes' pause after a short run in a stream, the
	// reaper's (progress.Lane.SetReapPause) and the plugin's (sent at
	// AttachLane); see config.Transfer.StreamPause.
	StreamPause time.Duration
	// HandoffSleeps has the lanes' long sleeps, the engine's and the
	// plugin's (sent at AttachLane), hand their P over; see
	// config.Transfer.HandoffSleeps.
	HandoffSleeps bool
	Stall         Stall
	// Contract is the completion rule; its window is looked at every
	// Stall.Interval, even with stall detection off.
	Contract Contract
	// EndGrace is how long a run may hold slices of tasks whose end was
	// decided (canceled, timed out; see progress.Batch.Finish) before it
	// is killed, looked at every Stall.Interval even with stall detection
	// off; zero: never (a Set without a Tracker).
	EndGrace time.Duration
	// Backoff is the restart schedule; zero: DefaultBackoff.
	Backoff Backoff
	// ControlTimeout bounds one control call to a plugin; zero: 10s. A
	// restart attempt as a whole gets three of them.
	ControlTimeout time.Duration
	// Tracker receives what the lanes' reapers reap; nil starts no
	// reapers (whoever polls the lanes reaps them).
	Tracker *progress.Tracker
	Log     hclog.Logger
}

// Stall says how runs are watched for a stall (see host/stall).
type Stall struct {
	// Off leaves only exits watched.
	Off bool
	// Interval is how often the lanes are looked at; zero: a second.
	// After and ProbeTimeout are stall.Config's.
	Interval, After, ProbeTimeout time.Duration
}

// Spec says which plugin a Plugin runs, and with what.
type Spec struct {
	Loader loader.Spec
	// Start is what each run is started with: the engine's identity and
	// the plugin's config block.
	Start sdk.StartConfig
}

// Hooks is what the engine does around a plugin's runs. Every field may
// be nil. They are called from the plugin's own goroutines; for one
// plugin, Owner, Up, Down and Replay never run at once (Restarted may
// overlap the next run's Down, when that run dies at once).
type Hooks struct {
	// Owner returns the owner of a new run's lanes (progress.Lane.Owner),
	// given what the run probed after Start (its rails): the engine
	// returns the run's rail set, which its tracker's Reaped hook feeds
	// the lanes' completions.
	Owner func(probe sdk.ProbeResult) any
	// Up is called when r is about to become the plugin's current run,
	// just before the plugin is marked Running: the engine makes r the
	// run its request path uses. The set's lock is held: Up must not
	// call the Set.
	Up func(r *Run)
	// Down is called once r's process has exited (why says how: exited,
	// or stalled and killed), after the plugin is marked Down and r's
	// lanes refuse new work, before r's process is released and the
	// restart backoff begins: the engine fails r's tasks and forgets
	// what its rails were doing.
	Down func(r *Run, why string)
	// Replay brings a restart's new run r to where the previous run was
	// (the engine: re-registers its memory and re-opens its peers) and
	// then calls commit, which makes r current, calls Up, marks the
	// plugin Running and starts r's goroutines. Calling commit under the
	// lock that guards what was replayed keeps a concurrent registration
	// from slipping between replay and commit. commit returns false when
	// the set is stopping (r is then discarded; return ErrStopped). An
	// error discards r and schedules the next attempt, except ErrStopped,
	// which ends the restarts.
	Replay func(ctx context.Context, r *Run, commit func() bool) error
	// Restarted is called after a restart or an upgrade committed,
	// outside any lock: the engine republishes its descriptor (the
	// endpoint may differ).
	Restarted func(ctx context.Context, r *Run)
	// Retiring is called once r, a run an upgrade replaced, drained (or
	// its bound passed), just before its lanes are marked down and its
	// process stopped: the engine notes it as the run whose writes a
	// failover must fence first.
	Retiring func(r *Run)
	// Retired is Down for a run an upgrade replaced: called once its
	// process exited (stopped after draining, or dead before), with its
	// lanes marked down, before they are closed. The engine fails over
	// the tasks still on its lanes (fencing the writes, as for a death);
	// the plugin's state does not change.
	Retired func(r *Run, why string)
}

// Run is one run of a plugin process. Its fields are set by the launch
// and never change after the run is handed to Hooks.
type Run struct {
	Proc *loader.Plugin
	Gen  uint32 // generation stamped on its lanes' completions
	// ID is the run's number as the plugin's peers know it
	// (sdk.StartConfig.Run): a peer fences what this run sent by it.
	ID       uint64
	Probe    sdk.ProbeResult
	Endpoint sdk.Endpoint
	Lanes    []*progress.Lane
	// Owner is what Hooks.Owner returned; every lane has it.
	Owner any
	// stalled is why the supervisor killed this run, nil unless it did;
	// its watcher reports it.
	stalled atomic.Pointer[string]
	// retired: an upgrade replaced the run, which drains and ends
	// without a restart (set under the set's mu); gone is closed once
	// its watcher is done with it.
	retired atomic.Bool
	gone    chan struct{}
}

// Plugin is one configured plugin over its runs.
type Plugin struct {
	set   *Set
	index int
	name  string
	spec  Spec // what the next run is launched from; under mu (an upgrade changes Loader)
	hooks Hooks
	err   error // why it failed at Start; set before Start returns

	cur   atomic.Pointer[Run] // nil until a launch got a process
	state atomic.Uint32       // a State; changed under mu
	mu    sync.Mutex          // guards state transitions and past
	// past sums the completion contract violations of the runs before
	// the current one, whose lanes are closed and forgotten.
	past progress.Violations

	lastErr  atomic.Pointer[string] // why the latest restart attempt failed
	lastExit atomic.Pointer[string] // why the latest run ended
	restarts atomic.Uint64          // runs started after the first
	stalls   atomic.Uint64          // runs killed because they stalled
	faulty   atomic.Uint64          // runs killed for breaking the completion contract
	// lives numbers the processes launched, failed launches included:
	// each run's lanes drop completions stamped with another number.
	lives atomic.Uint32

	// upgrading is held (true) from an upgrade's start to the end of its
	// old run's drain: one upgrade of a plugin at a time.
	upgrading atomic.Bool
	upgrade   atomic.Pointer[UpgradeStatus] // the latest upgrade, nil before any
	upgraded  atomic.Uint64                 // upgrades committed
	refused   atomic.Uint64                 // upgrades whose new run did not start
	// retiring are the runs upgrades replaced that have not ended yet;
	// under the set's mu.
	retiring []*Run
}

// Spec returns what p's next run is launched from: its binary and its
// start configuration (an upgrade changes both).
func (p *Plugin) Spec() Spec {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.spec
}

// Name returns the plugin's configured name.
func (p *Plugin) Name() string { return p.name }

// Index returns the plugin's position in its Set, in Start order.
func (p *Plugin) Index() int { return p.index }

// Err returns why the plugin failed at Start, nil if it started.
func (p *Plugin) Err() error { return p.err }

// Run returns the current run: the running one, the one that went down
// until a restart replaces it, or the failed first launch's (process
// killed) for Status; nil when no process was ever started.
func (p *Plugin) Run() *Run { return p.cur.Load() }

// State returns where the plugin is in its life.
func (p *Plugin) State() State { return State(p.state.Load()) }

// Down reports whether the plugin's process exited and it is not back
// yet (Down or Restarting). It is one atomic load: the submit path asks.
func (p *Plugin) Down() bool {
	s := p.State()
	return s == Down || s == Restarting
}

// Restarts returns how many runs started after the first.
func (p *Plugin) Restarts() uint64 { return p.restarts.Load() }

// to applies ev to the plugin's state and tells Set.Changed's waiters.
// It reports whether ev was a valid transition.
func (p *Plugin) to(ev Event) bool {
	p.mu.Lock()
	from := p.State()
	next, ok := Next(from, ev)
	if ok {
		p.state.Store(uint32(next))
		p.set.epoch.Add(1)
	}
	p.mu.Unlock()
	if !ok {
		p.set.log.Error("plugin state: invalid transition; ignored", "plugin", p.name, "state", from.GoString(), "event", ev)
		return false
	}
	p.set.signal()
	return true
}

// Set is the engine's plugins: it launches them, owns the goroutines that
// watch, supervise and reap their runs, and restarts them.
type Set struct {
	cfg Config
	log hclog.Logger

	mu       sync.Mutex // guards plugins and stopping
	plugins  []*Plugin
	stopping bool // Quit was called: nothing commits a run any more
	quit     chan struct{}
	wg       sync.WaitGroup // watchers, supervisors, reapers, restarts

	chMu    sync.Mutex
	changed chan struct{}

	// epoch counts the changes of state of the set's plugins (Epoch), on
	// a cache line of its own: the submit path reads it on every call,
	// and it changes only when a plugin goes down or comes up.
	_     [64]byte
	epoch atomic.Uint64
	_     [56]byte
}

// Epoch returns a number that changes (grows) whenever any plugin of the
// set changes state, and only then. A caller that keeps an answer that
// depends on the plugins' states and runs (a route) keeps the epoch it
// read before it looked, and uses the answer while Epoch returns the
// same; a run is replaced (Hooks.Up) before the state change that
// announces it.
func (s *Set) Epoch() uint64 { return s.epoch.Load() }

// New returns an empty Set; Start adds plugins to it.
func New(cfg Config) *Set {
	if cfg.Lanes <= 0 {
		cfg.Lanes = 1
	}
	if cfg.ControlTimeout <= 0 {
		cfg.ControlTimeout = 10 * time.Second
	}
	if cfg.Stall.Interval <= 0 {
		cfg.Stall.Interval = time.Second // a ticker needs a period
	}
	log := cfg.Log
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Set{cfg: cfg, log: log, quit: make(chan struct{}), changed: make(chan struct{})}
}

// Changed returns a channel that is closed at the next change of state of
// any plugin in the set (up, down, a restart attempt beginning or
// failing), and then replaced. To wait for a plugin to be up again, take
// the channel first and then look at the state, so that no change falls
// between the look and the wait:
//
//	for {
//		ch := set.Changed()
//		if p.State() == supervisor.Running {
//			break
//		}
//		select {
//		case <-ch:
//		case <-ctx.Done():
//			return ctx.Err()
//		}
//	}
func (s *Set) Changed() <-chan struct{} {
	s.chMu.Lock()
	defer s.chMu.Unlock()
	return s.changed
}

func (s *Set) signal() {
	s.chMu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.chMu.Unlock()
}

// Plugins returns the set's plugins in Start order.
func (s *Set) Plugins() []*Plugin {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Plugin(nil), s.plugins...)
}

// Start launches the first run of a plugin and, if it runs, starts its
// watchers. A plugin that cannot run is returned Failed with Err saying
// why, so that the engine still runs on the others and can report it.
func (s *Set) Start(ctx context.Context, spec Spec, h Hooks) *Plugin {
	p := &Plugin{set: s, name: spec.Loader.Name, spec: spec, hooks: h}
	s.mu.Lock()
	p.index = len(s.plugins)
	s.plugins = append(s.plugins, p)
	s.mu.Unlock()
	r, err := s.launch(ctx, p, spec)
	if r != nil {
		p.cur.Store(r)
	}
	if err == nil && !s.commit(p, r, nil) {
		err = &loader.Error{Name: p.name, Path: spec.Loader.Path, Reason: "engine closing", Err: ErrStopped}
		s.discard(r)
	}
	if err != nil {
		p.err = err
		p.to(Refused)
		s.log.Error("plugin not usable", "plugin", p.name, "error", err)
		return p
	}
	s.log.Debug("plugin started", "plugin", p.name, "path", spec.Loader.Path, "pid", r.Proc.PID())
	return p
}

// commit makes r the current run of p (old, if any, retired), marks p
// Running and starts r's goroutines; it refuses (false) once Quit was
// called, so that Close sees every run that will ever start.
func (s *Set) commit(p *Plugin, r, old *Run) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return false
	}
	if old != nil {
		p.mu.Lock()
		p.past = p.past.Add(violations(old.Lanes))
		p.mu.Unlock()
	}
	if p.hooks.Up != nil {
		p.hooks.Up(r)
	}
	p.cur.Store(r)
	if old != nil {
		p.lastErr.Store(nil)
		p.restarts.Add(1)
	}
	p.to(Launched)
	s.startRun(p, r)
	return true
}

// startRun starts the reapers of r's lanes, the watcher of its process
// and its stall supervisor; s.mu held.
func (s *Set) startRun(p *Plugin, r *Run) {
	if s.cfg.Tracker != nil {
		for _, l := range r.Lanes {
			s.wg.Add(1)
			go func() { defer s.wg.Done(); l.Reap(s.cfg.Tracker) }()
		}
	}
	s.wg.Add(1)
	go s.watch(p, r)
	if len(r.Lanes) > 0 { // stall detection, and the completion contract
		s.wg.Add(1)
		go s.supervise(p, r)
	}
}

// closeLanes closes r's lanes: their reapers stopped and waited for,
// their rings unmapped and their memfds closed. A submitter or waiter
// that still holds one finds it closed (progress.Lane.Close).
func (s *Set) closeLanes(r *Run) {
	for _, l := range r.Lanes {
		l.Close(s.cfg.Tracker != nil)
	}
}

// discard releases a run that never became current.
func (s *Set) discard(r *Run) {
	for _, l := range r.Lanes {
		l.Close(false)
	}
	r.Proc.Kill()
}

// Quit stops what the set does on its own: no exit is acted on, no
// restart is attempted or committed from here on. Safe to call twice.
func (s *Set) Quit() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.stopping {
		s.stopping = true
		close(s.quit)
	}
}

// Stop asks every running plugin to stop (within ctx) and marks every
// current run's lanes down, so that nothing more is submitted. The
// processes and lanes stay until Close. It calls Quit first.
func (s *Set) Stop(ctx context.Context) {
	s.Quit()
	for _, p := range s.Plugins() {
		r := p.Run()
		if r == nil {
			continue
		}
		if p.err == nil && !p.Down() {
			if err := r.Proc.Client.Stop(ctx); err != nil {
				s.log.Warn("plugin stop failed", "plugin", p.name, "error", err)
			}
		}
		for _, l := range r.Lanes {
			l.MarkDown()
		}
		for _, r := range p.retiringRuns() {
			for _, l := range r.Lanes {
				l.MarkDown()
			}
		}
	}
}

// Close kills every plugin process, closes every current run's lanes
// (unmapped, reapers stopped; a dead run's were closed by its watcher)
// and waits for every goroutine of the set. Call it after Stop and after
// the lanes' tasks were failed.
func (s *Set) Close() {
	s.Quit()
	ps := s.Plugins()
	for _, p := range ps {
		if r := p.Run(); r != nil {
			r.Proc.Kill()
		}
		for _, r := range p.retiringRuns() {
			r.Proc.Kill()
		}
	}
	for _, p := range ps {
		if r := p.Run(); r != nil && p.err == nil {
			s.closeLanes(r)
		}
		for _, r := range p.retiringRuns() {
			s.closeLanes(r)
		}
	}
	s.wg.Wait()
}

package host

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host/fence"
	"github.com/ferrydev/ferry/host/loader"
	"github.com/ferrydev/ferry/host/localmem"
	"github.com/ferrydev/ferry/host/metastore"
	"github.com/ferrydev/ferry/host/metrics"
	"github.com/ferrydev/ferry/host/notify"
	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/host/publish"
	"github.com/ferrydev/ferry/host/rails"
	"github.com/ferrydev/ferry/host/remotes"
	"github.com/ferrydev/ferry/host/segment"
	"github.com/ferrydev/ferry/host/selector"
	"github.com/ferrydev/ferry/host/supervisor"
	"github.com/ferrydev/ferry/host/topology"
	"github.com/ferrydev/ferry/host/trace"
	"github.com/ferrydev/ferry/sdk"
)

// fenceTimeout bounds one fence request to a target engine (which
// waits for its plugin's answer).
const fenceTimeout = 2 * time.Second

// controlTimeout bounds one control call to a plugin.
const controlTimeout = 10 * time.Second

// Option adjusts an Engine at New.
type Option func(*options)

type options struct {
	logger     hclog.Logger
	path       pathOptions           // see path.go
	metricsReg prometheus.Registerer // see metrics.go
	locked     bool                  // see locked.go
}

// WithLogger sends the engine's and its plugins' logs to l.
func WithLogger(l hclog.Logger) Option { return func(o *options) { o.logger = l } }

// pluginState is one configured plugin as the engine's request path sees
// it. Its life (runs, restarts, status) is the supervisor's; the engine
// keeps what it builds around each run (the rail set) and the names the
// request path reads.
type pluginState struct {
	idx  int32 // position in Engine.plugins
	name string
	sv   *supervisor.Plugin
	err  error                     // why it is not usable; set at New only
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
// the supervisor's run, and the rail set the engine built for it. p,
// lanes and endpoint are sv's, named as the request path reads them.
type pluginRun struct {
	sv       *supervisor.Run
	p        *loader.Plugin
	lanes    []*progress.Lane
	endpoint sdk.Endpoint
	rails    *rails.Set
}

func (ps *pluginState) run() *pluginRun { return ps.cur.Load() }

// proc returns the current process, nil when the plugin never started.
func (ps *pluginState) proc() *loader.Plugin {
	if r := ps.cur.Load(); r != nil {
		return r.p
	}
	return nil
}

// down reports whether its process exited and it is not back yet.
func (ps *pluginState) down() bool { return ps.sv.Down() }

func (ps *pluginState) usable() bool { return ps.err == nil && ps.cur.Load() != nil && !ps.sv.Down() }

func (r *pluginRun) lane(ps *pluginState) *progress.Lane {
	if len(r.lanes) == 1 {
		return r.lanes[0]
	}
	return r.lanes[int(ps.next.Add(1))%len(r.lanes)]
}

// Engine is one Ferry endpoint: its own segment, its plugins, and its view
// of remote segments. Methods are safe for concurrent use.
type Engine struct {
	cfg         *config.Config
	log         hclog.Logger
	name        string
	incarnation uint64
	machineID   string
	sliceSize   uint64
	// lockedCallers: the callers' goroutines are locked to their threads
	// (WithLockedCallers), so a waiter's spin never hands its thread to
	// the scheduler.
	lockedCallers bool

	meta      metastore.Backend
	metaURL   string // of the embedded or HTTP metastore, "" otherwise
	keyPrefix string
	pub       *publish.Publisher // our descriptor, kept alive while we run; see presence.go

	plugins    []*pluginState
	byName     map[string]*pluginState
	supervisor *supervisor.Set    // launches, watches and restarts them; see pluginHooks
	sel        *selector.Selector // the policies, compiled; see route.go

	tracker *progress.Tracker
	path    requestPath  // the request path's stages; see path.go
	aborts  aborts       // ended tasks' slices to abort; see abort.go
	fences  *fence.Gates // targets whose writes wait for a fence; see fencing.go

	topo *segment.Topology // this machine, from sysfs; published

	// Failover goroutines (see retry.go): counted so that Close waits
	// for them; retryClosed, under retryMu, stops new ones.
	retryMu     sync.Mutex
	retryClosed bool
	retrying    sync.WaitGroup

	hc *notify.Service // the control service for peers; see notify.go
	// controlAddr is hc's address as peers can use it (controladdr.go),
	// published in the descriptor; set once by startControl.
	controlAddr string
	recent      recentFailures  // the latest failed attempts, for status
	trace       *trace.Recorder // nil without a trace block; see traces.go

	// mu serialises what a plugin restart must see whole: registrations
	// (mem's writers), open segments, publishing.
	mu    sync.Mutex
	mem   *localmem.Table  // allocations and registered buffers; see memory.go
	segs  *remotes.Table   // open remote segments; see segments.go
	fetch *remotes.Fetcher // reads their descriptors
	// signer signs the local descriptor and checks peers'; nil without
	// a cluster secret.
	signer *segment.Signer
	// secret is the cluster secret, nil without one; see secret.go.
	secret []byte
	// follow applies the metastore's watch to segs, nil without one;
	// unwatch stops it.
	follow    *remotes.Follower
	unwatch   context.CancelFunc
	segWatch  *metastore.Rewatch // nil without a metastore
	closed    atomic.Bool
	closeOnce sync.Once
	quit      chan struct{}  // closed by Close: failovers waiting on a restart give up
	wg        sync.WaitGroup // the metastore watch that follow runs, and runAborts

	metricsX *metrics.Exporter
	credit   *creditState // receiver credit; nil when off (credit.go)
}

// New starts an engine: its metastore connection (or embedded metastore),
// every enabled plugin, and its lanes; then publishes its descriptor.
func New(ctx context.Context, cfg *config.Config, opts ...Option) (*Engine, error) {
	if cfg == nil {
		return nil, fmt.Errorf("%w: nil config", ErrInvalid)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o := options{}
	for _, f := range opts {
		f(&o)
	}
	if o.logger == nil {
		o.logger = hclog.New(&hclog.LoggerOptions{Name: "ferry", Level: hclog.Warn, Output: os.Stderr})
	}
	e := &Engine{
		cfg:         cfg,
		log:         o.logger.Named(cfg.Name),
		name:        cfg.Name,
		incarnation: newIncarnation(),
		machineID:   cfg.MachineID,
		sliceSize:   uint64(cfg.Transfer.SliceSize),
		byName:      make(map[string]*pluginState),
		tracker:     progress.NewTracker(0),
		quit:        make(chan struct{}),
	}
	e.fences = fence.New(fencePort{e}, fenceTimeout)
	if e.machineID == "" {
		e.machineID = config.DefaultMachineID()
	}
	if e.sliceSize == 0 {
		e.sliceSize = 1 << 20
	}
	e.topo = topology.Discover(topology.Root, interfaceAddrs)
	// The tracker's hooks, in the order it calls them: failover (a
	// failed attempt), aborts (a held task), admission (grants given back
	// at a task's end), the meter and the observer, rails and credit (a
	// lane's reaped completions).
	e.tracker.Hook(progress.Hook{Failed: e.onFailure})
	e.tracker.Hook(progress.Hook{Held: e.onHold})
	e.aborts.wake = make(chan struct{}, 1)
	e.mem = localmem.New(cfg.Name, controlTimeout)
	e.segs = remotes.New(e.machineID, controlTimeout)
	sv := cfg.Supervise.WithDefaults()
	e.supervisor = supervisor.New(supervisor.Config{
		Lanes: cfg.Transfer.Lanes, RingDepth: cfg.Transfer.RingDepth, Spin: cfg.Transfer.Spin, SpinSmall: cfg.Transfer.SpinSmall, StreamPause: cfg.Transfer.StreamPause,
		Stall:          supervisor.Stall{Off: sv.Off, Interval: sv.Interval, After: sv.StallAfter, ProbeTimeout: sv.ProbeTimeout},
		Contract:       supervisor.Contract{Violations: uint64(sv.ContractViolations), Within: sv.ContractWindow},
		EndGrace:       sv.EndGrace,
		Backoff:        supervisor.DefaultBackoff,
		ControlTimeout: controlTimeout,
		Tracker:        e.tracker,
		Log:            e.log,
	})
	e.lockedCallers = o.locked
	e.attachMetrics(&o)
	e.attachTrace(&o)
	if err := e.wireQoS(); err != nil {
		return nil, err
	}
	e.wirePath(o.path)
	e.credit = newCredit(e)
	e.tracker.Hook(e.reapedHook())
	if err := e.openMetastore(ctx); err != nil {
		return nil, err
	}
	for _, pc := range cfg.Plugins {
		if !pc.Enabled {
			continue
		}
		ps := e.startPlugin(ctx, int32(len(e.plugins)), pc)
		e.plugins = append(e.plugins, ps)
		e.byName[ps.name] = ps
	}
	e.wg.Add(1)
	go e.runAborts()
	e.startQoS()
	if err := e.checkStarted(); err != nil {
		e.Close()
		return nil, err
	}
	sel, err := newSelector(cfg, e.plugins)
	if err == nil {
		err = e.checkPolicyRails()
	}
	if err != nil {
		e.Close()
		return nil, err
	}
	e.sel = sel
	if err := e.startControl(); err != nil {
		e.Close()
		return nil, err
	}
	e.startCredit()
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		e.hc.PruneWhile(e.quit, e.segs.Changed, e.liveControls, controlIdle)
	}()
	e.watchSegments()
	if err := e.publish(ctx); err != nil {
		e.Close()
		return nil, err
	}
	if err := e.startMetrics(&o); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// interfaceAddrs lists an interface's addresses, for the topology.
func interfaceAddrs(name string) []string {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return nil
	}
	return addrStrings(ifc.Addrs())
}

// addrStrings is as as text ("10.0.0.1/24"), nil on err.
func addrStrings(as []net.Addr, err error) []string {
	if err != nil {
		return nil
	}
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.String()
	}
	return out
}

func newIncarnation() uint64 {
	var b [8]byte
	for {
		rand.Read(b[:])
		if v := binary.LittleEndian.Uint64(b[:]); v != 0 {
			return v
		}
	}
}

func (e *Engine) openMetastore(ctx context.Context) error {
	m := e.cfg.Metastore
	e.keyPrefix = m.KeyPrefix()
	secret, err := clusterSecret(e.cfg)
	if err != nil {
		return fmt.Errorf("%w: engine %q: %w", ErrInvalid, e.name, err)
	}
	e.secret = secret
	signer, err := e.openSigner()
	if err != nil {
		return err
	}
	e.signer = signer
	// With a secret a descriptor's Seq is signed: peers keep the newest.
	e.segs.Ordered = signer != nil
	var verify func(string, []byte) bool
	if signer != nil {
		// The embedded server keeps headroom for engines' signed
		// descriptors (metastore.ServerOptions).
		verify = signer.Verify
	}
	b, err := metastore.Open(ctx, metastore.Options{
		Kind: m.Kind, Listen: m.Listen, URL: m.URL, Server: metastore.ServerOptions{Verify: verify},
		Address: m.Address, Endpoints: m.Endpoints, Username: m.Username, Password: m.Password,
		Database: m.Database, TLS: m.TLS, CAFile: m.CAFile,
	})
	if err != nil {
		return fmt.Errorf("engine %q: metastore: %w", e.name, err)
	}
	e.meta = b
	e.fetch = &remotes.Fetcher{Store: b, Prefix: e.keyPrefix, Peer: e.peerDescriptor, Log: e.log, Timeout: controlTimeout, Signer: e.signer}
	if m.Kind == config.MetastoreNone {
		e.fetch.Store = nil // peer-to-peer only
	}
	e.pub = publish.New(publish.Config{
		Store: b, Key: segment.Key(e.keyPrefix, e.name), Name: e.name, Incarnation: e.incarnation,
		TTL: m.LeaseTTL(), Timeout: controlTimeout, Log: e.log, Describe: e.descriptor, Signer: e.signer,
		Secret: e.secret,
	})
	switch x := b.(type) {
	case *metastore.Embedded:
		e.metaURL = x.URL()
	case *metastore.HTTPClient:
		e.metaURL = x.URL()
	}
	return nil
}

// startPlugin has the supervisor start one plugin. A plugin that cannot
// run is kept with its reason, so that the engine still runs on the
// others and `ferry plugins` can say why.
func (e *Engine) startPlugin(ctx context.Context, idx int32, pc config.Plugin) *pluginState {
	ps := &pluginState{idx: idx, name: pc.Name}
	dir := ""
	if e.cfg.File != "" {
		dir = filepath.Dir(e.cfg.File)
	}
	spec := supervisor.Spec{
		Loader: loader.Spec{Name: pc.Name, Path: loader.Resolve(pc.Name, pc.Path, e.cfg.PluginDir, dir), SHA256: pc.SHA256},
		Start: sdk.StartConfig{
			Engine: e.name, Incarnation: e.incarnation, MachineID: e.machineID,
			Config: pc.Body, ConfigFile: pc.BodyFile, ConfigLine: pc.BodyLine, ConfigColumn: pc.BodyColumn, ConfigByte: pc.BodyByte,
			ClusterSecret: e.secret,
		},
	}
	ps.sv = e.supervisor.Start(ctx, spec, e.pluginHooks(ps))
	if ps.err = ps.sv.Err(); ps.err != nil {
		if r := ps.sv.Run(); r != nil { // for Plugins and PluginPID
			rs := railsOf(r.Owner)
			ps.cur.Store(&pluginRun{sv: r, p: r.Proc, endpoint: r.Endpoint, rails: rs})
			ps.rails.Store(rs)
		}
	}
	return ps
}

// railsOf returns the rail set a run's lanes are owned by (pluginHooks'
// Owner built it), nil for none.
func railsOf(owner any) *rails.Set {
	rs, _ := owner.(*rails.Set)
	return rs
}

// pluginHooks is what the engine does around each run of ps: the one
// place where plugin lifecycle meets rails, tasks, memory, peers and the
// descriptor.
func (e *Engine) pluginHooks(ps *pluginState) supervisor.Hooks {
	return supervisor.Hooks{
		Owner: func(probe sdk.ProbeResult) any {
			if rs := ps.rails.Load(); rs != nil && rs.SameRails(probe.Rails) {
				return rs
			}
			return rails.NewSet(ps.name, probe.Rails, e.cfg.Rails, e.cfg.Policies)
		},
		Up: func(r *supervisor.Run) {
			rs := railsOf(r.Owner) // Owner built it
			ps.cur.Store(&pluginRun{sv: r, p: r.Proc, lanes: r.Lanes, endpoint: r.Endpoint, rails: rs})
			ps.rails.Store(rs)
		},
		Down: func(r *supervisor.Run, why string) {
			err := fmt.Errorf("%w: plugin %q (%s): %s", ErrPluginFailed, ps.name, r.Proc.Path, why)
			keep, fenced := e.fenceDown(ps, r) // writes it may still carry end once their targets fenced it
			n := e.tracker.FailTransportExcept(ps.idx, err, keep)
			if fenced != nil {
				fenced(err)
			}
			railsOf(r.Owner).ForgetAll()
			e.creditDown(r.Proc.Info.TwoSided)
			e.log.Error("plugin down; its in-flight tasks failed; restarting it", "plugin", ps.name, "pid", r.Proc.PID(), "reason", why, "tasks", n)
		},
		Replay: func(ctx context.Context, r *supervisor.Run, commit func() bool) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			if e.closed.Load() {
				return supervisor.ErrStopped
			}
			if err := e.replay(ctx, ps, r); err != nil {
				return err
			}
			if !commit() {
				return supervisor.ErrStopped
			}
			return nil
		},
		Restarted: func(ctx context.Context, r *supervisor.Run) {
			if err := e.publish(ctx); err != nil { // its endpoint may have changed
				e.log.Warn("descriptor not republished after plugin restart", "plugin", ps.name, "error", err)
			}
		},
	}
}

// replay brings a restart's run r of ps to where the previous one was:
// every registered region (same ids) and every open peer (same ids)
// again; e.mu held.
func (e *Engine) replay(ctx context.Context, ps *pluginState, r *supervisor.Run) error {
	if err := e.mem.Replay(ctx, pluginPort{name: ps.name, p: r.Proc}); err != nil {
		return err
	}
	return e.segs.Replay(ctx, int(ps.idx), ps.name, r.Proc.Client.OpenPeer)
}

// Name returns the engine's segment name.
func (e *Engine) Name() string { return e.name }

// Incarnation returns this engine's incarnation (new at every start).
func (e *Engine) Incarnation() uint64 { return e.incarnation }

// MachineID returns the machine id the engine publishes.
func (e *Engine) MachineID() string { return e.machineID }

// MetastoreURL returns the URL of the embedded metastore, or of the HTTP
// metastore in use, or "".
func (e *Engine) MetastoreURL() string { return e.metaURL }

// PluginStatus is what the engine knows of one configured plugin.
type PluginStatus struct {
	Name     string `json:"name"`
	Path     string `json:"path"`
	SHA256   string `json:"sha256"`
	Version  string `json:"version"`
	Protocol int    `json:"protocol"`
	// State is "running", "restarting" (its process exited; the engine
	// is starting it again), "unavailable" or "failed"; Reason says why.
	State    string `json:"state"`
	Reason   string `json:"reason,omitempty"`
	Restarts uint64 `json:"restarts"` // runs started after the first
	// PID is the current run's process id; 0 when none runs.
	PID int `json:"pid"`
	// Stalls counts the runs the engine found stalled and killed.
	Stalls uint64 `json:"stalls"`
	// Faulty counts the runs the engine found faulty and killed: they
	// broke the completion contract as often as the supervise block's
	// contract_violations allow within contract_window.
	Faulty uint64 `json:"faulty"`
	// Completions of every run that broke the contract, dropped and
	// counted: tokens that name no slice the engine sent, duplicates, and
	// byte counts above what the slice carried (that slice failed).
	UnknownCompletions   uint64 `json:"unknown_completions"`
	DuplicateCompletions uint64 `json:"duplicate_completions"`
	OverlongCompletions  uint64 `json:"overlong_completions"`
	// Outstanding is how many descriptors the current run holds:
	// submitted to its lanes and not completed.
	Outstanding int64 `json:"outstanding"`
	// LastExit says why the previous run ended, "" while the first runs.
	LastExit string     `json:"last_exit,omitempty"`
	Rails    []sdk.Rail `json:"rails,omitempty"`
	Counters map[string]uint64
}

// RailStatus is one rail of one transport, as the engine sees it.
type RailStatus = rails.Status

// Rails reports every rail of every running transport: its statistics
// (bytes, slices, in flight, learnt bandwidth, errors) and health.
func (e *Engine) Rails() []RailStatus {
	var out []RailStatus
	now := time.Now()
	for _, ps := range e.plugins {
		if rs := ps.rails.Load(); rs != nil && ps.err == nil {
			out = append(out, rs.Status(now)...)
		}
	}
	return out
}

// checkPolicyRails fails when a policy names a rail that none of its
// transports has (by rail block label or the plugin's own rail name).
// Transports that are not running cannot say which rails they have; a
// name is only refused when every transport of the policy could.
func (e *Engine) checkPolicyRails() error {
	var errs []error
	for i := range e.cfg.Policies {
		p := &e.cfg.Policies[i]
		for _, name := range p.Rails {
			found, known := false, true
			for _, t := range p.Transports {
				ps := e.byName[t]
				if ps == nil || ps.rails.Load() == nil {
					known = false
				} else if ps.rails.Load().Has(name) {
					found = true
				}
			}
			if !found && known {
				errs = append(errs, fmt.Errorf("%w: %w", ErrInvalid, p.RailsError("%q is not a rail of %s (rails: %s); name a rail block or one of the transports' rails", name, strings.Join(p.Transports, ", "), e.railNames(p.Transports))))
			}
		}
	}
	return errors.Join(errs...)
}

// railNames lists the rails of transports, as "transport:name" and
// "transport:label", for messages.
func (e *Engine) railNames(transports []string) string {
	var have []string
	for _, t := range transports {
		rs := e.byName[t].rails.Load()
		for _, r := range rs.Rails() {
			have = append(have, t+":"+r.Name)
			if r.Label != "" {
				have = append(have, t+":"+r.Label)
			}
		}
	}
	return strings.Join(have, ", ")
}

// Plugins reports every configured plugin, with its counters when running.
func (e *Engine) Plugins(ctx context.Context) []PluginStatus {
	var out []PluginStatus
	for _, ps := range e.plugins {
		st := ps.sv.Status(ctx)
		out = append(out, PluginStatus{
			Name: ps.name, Path: st.Path, SHA256: st.SHA256, Version: st.Version, Protocol: st.Protocol,
			State: st.State, Reason: st.Reason, Restarts: st.Restarts, PID: st.PID, Stalls: st.Stalls, Faulty: st.Faulty,
			UnknownCompletions: st.Violations.Unknown, DuplicateCompletions: st.Violations.Duplicate, OverlongCompletions: st.Violations.Overlong,
			Outstanding: st.Outstanding, LastExit: st.LastExit, Rails: st.Rails, Counters: st.Counters,
		})
	}
	return out
}

// Close stops the engine: unpublishes its descriptor, stops its plugins,
// fails what is still pending, and frees its memory. Safe to call twice.
func (e *Engine) Close() error {
	var errs []error
	e.closeOnce.Do(func() {
		e.stopMetrics()
		e.closed.Store(true)
		e.supervisor.Quit() // no plugin exit is acted on, no restart starts
		ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
		defer cancel()
		if e.pub != nil {
			if err := e.pub.Close(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		e.stopControl()
		if e.unwatch != nil {
			e.unwatch() // e.wg.Wait below waits for the watch to end
		}
		close(e.quit)
		e.fences.Stop() // writes waiting at a gate give up
		// Failovers in progress give up (they watch quit) or finish
		// submitting; none starts from here on.
		e.retryMu.Lock()
		e.retryClosed = true
		e.retryMu.Unlock()
		e.retrying.Wait()
		// Quit above made the supervisor refuse to commit restarted runs:
		// the runs it stops here are the last ones.
		e.supervisor.Stop(ctx)
		closeErr := fmt.Errorf("%w: engine %q closed", ErrClosed, e.name)
		for _, ps := range e.plugins {
			e.tracker.FailTransport(ps.idx, closeErr)
		}
		e.supervisor.Close() // kills the processes, unmaps the lanes, waits
		e.wg.Wait()
		e.mem.Close()
		if e.meta != nil {
			if err := e.meta.Close(); err != nil {
				errs = append(errs, err)
			}
		}
	})
	return errors.Join(errs...)
}

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
	"sync"
	"sync/atomic"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host/control"
	"github.com/ferrydev/ferry/host/loader"
	"github.com/ferrydev/ferry/host/metastore"
	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/host/segment"
	"github.com/ferrydev/ferry/host/selector"
	"github.com/ferrydev/ferry/host/topology"
	"github.com/ferrydev/ferry/sdk"
)

// controlTimeout bounds one control call to a plugin.
const controlTimeout = 10 * time.Second

// Option adjusts an Engine at New.
type Option func(*options)

type options struct {
	logger hclog.Logger
	path   pathOptions // see path.go
}

// WithLogger sends the engine's and its plugins' logs to l.
func WithLogger(l hclog.Logger) Option { return func(o *options) { o.logger = l } }

// pluginState is one configured plugin as the engine sees it. What one
// run of its process owns (the process, its endpoint, its lanes) sits in a
// pluginRun behind an atomic pointer: the submit path reads it lock-free
// while a restart swaps in the next run.
type pluginState struct {
	idx     int32 // position in Engine.plugins
	name    string
	cfg     config.Plugin
	spec    loader.Spec
	cur     atomic.Pointer[pluginRun] // nil when it never started
	next    atomic.Uint32
	err     error                  // why it is not usable; set at New only
	down    atomic.Bool            // the process exited and is not back yet
	lastErr atomic.Pointer[string] // why the latest restart attempt failed
	// restarts counts the runs started after the first.
	restarts atomic.Uint64
	// rails is the current run's rail set; a restart that probes the same
	// rails keeps it, and what it learnt.
	rails atomic.Pointer[railSet]
	// lives numbers the processes launched, failed launches included:
	// each run's lanes drop completions stamped with another number.
	lives atomic.Uint32
	// stalls counts the runs killed because they stalled.
	stalls atomic.Uint64
	// lastExit says why the latest run ended: the process exited, or it
	// stalled and was killed; nil while the first run runs.
	lastExit atomic.Pointer[string]
	// retired holds the lanes of previous runs: a submitter may still hold
	// one, so they are unmapped only at Close; e.mu guards it.
	retired []*progress.Lane
}

// pluginRun is one run of a plugin process.
type pluginRun struct {
	p        *loader.Plugin
	gen      uint32 // its generation, from pluginState.lives
	probe    sdk.ProbeResult
	endpoint sdk.Endpoint
	lanes    []*progress.Lane
	rails    *railSet
	// stalled is why the supervisor killed this run, nil unless it did;
	// its watcher reports it.
	stalled atomic.Pointer[string]
}

func (ps *pluginState) run() *pluginRun { return ps.cur.Load() }

// proc returns the current process, nil when the plugin never started.
func (ps *pluginState) proc() *loader.Plugin {
	if r := ps.cur.Load(); r != nil {
		return r.p
	}
	return nil
}

func (ps *pluginState) usable() bool { return ps.err == nil && ps.cur.Load() != nil && !ps.down.Load() }

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

	meta      metastore.Backend
	metaURL   string // of the embedded or HTTP metastore, "" otherwise
	keyPrefix string
	lease     metastore.Lease // our descriptor, kept alive while we run
	// health is the latest metastore trouble the lease or a publish
	// reported, nil once the descriptor is back; see MetastoreHealth.
	health     atomic.Pointer[error]
	healthPoke chan struct{} // a publish failed: watchLease checks for recovery

	plugins []*pluginState
	byName  map[string]*pluginState
	sel     *selector.Selector // the policies, compiled; see route.go

	tracker *progress.Tracker
	path    requestPath // the request path's stages; see path.go

	topo *segment.Topology // this machine, from sysfs; published

	// Failover goroutines (see retry.go): counted so that Close waits
	// for them; retryClosed, under retryMu, stops new ones.
	retryMu     sync.Mutex
	retryClosed bool
	retrying    sync.WaitGroup

	hc *hostControl // the control service for peers; see notify.go

	mu        sync.Mutex // guards allocations, registrations, remotes, publishing
	allocs    map[uintptr]*allocation
	local     atomic.Pointer[[]localBuf] // sorted by base; read lock-free on submit
	nextReg   uint32
	remotes   atomic.Pointer[[]*remote] // index = SegmentID-1
	closed    atomic.Bool
	closeOnce sync.Once
	quit      chan struct{}  // closed by Close: watchers and restarts stop
	wg        sync.WaitGroup // reapers and plugin watchers
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
		allocs:      make(map[uintptr]*allocation),
		healthPoke:  make(chan struct{}, 1),
		quit:        make(chan struct{}),
	}
	if e.machineID == "" {
		e.machineID = config.DefaultMachineID()
	}
	if e.sliceSize == 0 {
		e.sliceSize = 1 << 20
	}
	e.topo = topology.Discover(topology.Root, interfaceAddrs)
	e.tracker.OnFailure(e.onFailure)
	e.wirePath(o.path)
	empty := []localBuf{}
	e.local.Store(&empty)
	noRemotes := []*remote{}
	e.remotes.Store(&noRemotes)
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
	if err := e.publish(ctx); err != nil {
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
	as, err := ifc.Addrs()
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
	b, err := metastore.Open(ctx, metastore.Options{
		Kind: m.Kind, Listen: m.Listen, URL: m.URL,
		Address: m.Address, Endpoints: m.Endpoints, Username: m.Username, Password: m.Password,
		Database: m.Database, TLS: m.TLS, CAFile: m.CAFile,
	})
	if err != nil {
		return fmt.Errorf("engine %q: metastore: %w", e.name, err)
	}
	e.meta = b
	switch x := b.(type) {
	case *metastore.Embedded:
		e.metaURL = x.URL()
	case *metastore.HTTPClient:
		e.metaURL = x.URL()
	}
	return nil
}

// startPlugin starts, describes, probes and starts one plugin and its
// lanes. A plugin that cannot run is kept with its reason, so that the
// engine still runs on the others and `ferry plugins` can say why.
func (e *Engine) startPlugin(ctx context.Context, idx int32, pc config.Plugin) *pluginState {
	ps := &pluginState{idx: idx, name: pc.Name, cfg: pc}
	dir := ""
	if e.cfg.File != "" {
		dir = filepath.Dir(e.cfg.File)
	}
	ps.spec = loader.Spec{Name: pc.Name, Path: loader.Resolve(pc.Name, pc.Path, e.cfg.PluginDir, dir), SHA256: pc.SHA256}
	r, err := e.launch(ctx, ps)
	if r != nil {
		ps.cur.Store(r)
		ps.rails.Store(r.rails)
	}
	if err != nil {
		ps.err = err
		e.log.Error("plugin not usable", "plugin", pc.Name, "error", err)
		return ps
	}
	e.startRun(ps, r)
	e.log.Debug("plugin started", "plugin", pc.Name, "path", ps.spec.Path, "pid", r.p.PID())
	return ps
}

// launch starts one run of ps's process: loader.Start, Probe, Start with
// the engine's incarnation, and its lanes attached. On error the returned
// run, if any, holds only the process (killed) and its probe, for
// Plugins to describe.
func (e *Engine) launch(ctx context.Context, ps *pluginState) (*pluginRun, error) {
	pc := ps.cfg
	p, err := loader.Start(ctx, ps.spec, e.log)
	if err != nil {
		return nil, err
	}
	r := &pluginRun{p: p, gen: ps.lives.Add(1)}
	fail := func(reason string, err error) (*pluginRun, error) {
		for _, l := range r.lanes {
			l.Close(false)
		}
		r.lanes = nil
		p.Kill()
		return r, &loader.Error{Name: pc.Name, Path: ps.spec.Path, Reason: reason, Err: err}
	}
	cctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	if r.probe, err = p.Client.Probe(cctx); err != nil {
		return fail("probe failed", err)
	}
	if !r.probe.Available {
		return fail("unavailable: "+r.probe.Reason, nil)
	}

	r.endpoint, err = p.Client.Start(cctx, sdk.StartConfig{
		Engine: e.name, Incarnation: e.incarnation, MachineID: e.machineID,
		Config: pc.Body, ConfigFile: pc.BodyFile, ConfigLine: pc.BodyLine, ConfigColumn: pc.BodyColumn, ConfigByte: pc.BodyByte,
	})
	if err != nil {
		return fail("start failed", err)
	}
	// Rails depend on the plugin's configuration, which it has now.
	if pr, err := p.Client.Probe(cctx); err == nil && pr.Available {
		r.probe.Rails = pr.Rails
	}
	if r.rails = ps.rails.Load(); r.rails == nil || !r.rails.sameRails(r.probe.Rails) {
		r.rails = newRailSet(ps.name, r.probe.Rails, e.cfg.Rails, e.cfg.Policies)
	}
	lanes := e.cfg.Transfer.Lanes
	if lanes <= 0 {
		lanes = 1
	}
	for id := range lanes {
		l, err := progress.NewLane(uint32(id), e.cfg.Transfer.RingDepth, e.cfg.Transfer.Spin)
		if err != nil {
			return fail("cannot create lane", err)
		}
		l.Observer = r.rails
		l.SetSpinSmall(e.cfg.Transfer.SpinSmall)
		r.lanes = append(r.lanes, l)
		stamped, err := p.Client.AttachLane(cctx, uint32(id), r.gen, l.SQ, l.CQ, e.cfg.Transfer.Spin, e.cfg.Transfer.SpinSmall)
		if err != nil {
			return fail(fmt.Sprintf("attach lane %d failed", id), err)
		}
		switch stamped {
		case r.gen:
			l.SetGeneration(r.gen)
		case 0: // a plugin from before generations: its completions carry none
		default:
			return fail(fmt.Sprintf("attach lane %d: the plugin stamps generation %d, not %d", id, stamped, r.gen), nil)
		}
	}
	return r, nil
}

// startRun starts the reapers of r's lanes and the watcher of its process.
func (e *Engine) startRun(ps *pluginState, r *pluginRun) {
	for _, l := range r.lanes {
		e.wg.Add(1)
		go func() { defer e.wg.Done(); l.Reap(e.tracker) }()
	}
	e.wg.Add(1)
	go e.watchPlugin(ps, r)
	if !e.cfg.Supervise.Off && len(r.lanes) > 0 {
		e.wg.Add(1)
		go e.supervise(ps, r)
	}
}

// Restart backoff: the first attempt waits restartMin, each failed one
// doubles the wait up to restartMax.
const (
	restartMin = 100 * time.Millisecond
	restartMax = 10 * time.Second
)

// watchPlugin fails the work of a plugin whose process exits, then
// restarts it with backoff until it runs again or the engine closes.
func (e *Engine) watchPlugin(ps *pluginState, r *pluginRun) {
	defer e.wg.Done()
	select {
	case <-r.p.Exited():
	case <-e.quit:
		return
	}
	if e.closed.Load() {
		return
	}
	why := "the plugin process exited"
	if m := r.stalled.Load(); m != nil {
		why = *m + "; killed"
	}
	ps.lastExit.Store(&why) // before down: "restarting" always has its reason
	ps.down.Store(true)
	e.path.changes.changed()
	for _, l := range r.lanes {
		l.MarkDown()
	}
	err := fmt.Errorf("%w: plugin %q (%s): %s", ErrPluginFailed, ps.name, r.p.Path, why)
	n := e.tracker.FailTransport(ps.idx, err)
	r.rails.forgetAll()
	e.log.Error("plugin down; its in-flight tasks failed; restarting it", "plugin", ps.name, "pid", r.p.PID(), "reason", why, "tasks", n)
	r.p.Kill() // releases the dead process's client and fds
	wait := restartMin
	for {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-e.quit:
			t.Stop()
			return
		}
		if e.restart(ps, r) {
			return
		}
		wait = min(2*wait, restartMax)
	}
}

// restart starts the next run of ps and brings it to where the previous
// one was: every registered region (same ids) and every open peer (same
// ids) again, then marks it up. It reports whether it is done: the plugin
// runs again, or the engine closed.
func (e *Engine) restart(ps *pluginState, old *pluginRun) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 3*controlTimeout)
	defer cancel()
	r, err := e.launch(ctx, ps)
	if err != nil {
		msg := err.Error()
		ps.lastErr.Store(&msg)
		e.log.Warn("plugin restart failed; retrying", "plugin", ps.name, "error", err)
		return e.closed.Load()
	}
	discard := func() {
		for _, l := range r.lanes {
			l.Close(false)
		}
		r.p.Kill()
	}
	e.mu.Lock()
	if e.closed.Load() {
		e.mu.Unlock()
		discard()
		return true
	}
	allocs := make(map[*allocation]bool)
	for _, a := range e.allocs {
		allocs[a] = true
	}
	for _, lb := range *e.local.Load() {
		if lb.alloc == nil || !allocs[lb.alloc] {
			continue
		}
		perm := sdk.PermLocal
		switch lb.Perm {
		case segment.PermRemoteRead:
			perm = sdk.PermRemoteRead
		case segment.PermRemoteReadWrite:
			perm = sdk.PermRemoteReadWrite
		}
		cctx, c := context.WithTimeout(ctx, controlTimeout)
		err = r.p.Client.RegisterMemory(cctx, lb.Region, lb.alloc.region.FD(), lb.Base-uint64(lb.alloc.base), lb.Length, perm, lb.Location)
		c()
		if err != nil {
			err = fmt.Errorf("re-register region %d: %w", lb.Region, err)
			break
		}
	}
	if err == nil {
		for _, rem := range *e.remotes.Load() {
			if rem == nil || rem.retired != "" || !rem.opened[ps.idx] {
				continue
			}
			d := rem.desc
			cctx, c := context.WithTimeout(ctx, controlTimeout)
			err = r.p.Client.OpenPeer(cctx, sdk.Peer{ID: uint32(rem.id), Segment: rem.name, Incarnation: d.Incarnation, MachineID: d.MachineID, Endpoint: d.Transports[ps.name]})
			c()
			if err != nil {
				err = fmt.Errorf("re-open peer %q: %w", rem.name, err)
				break
			}
		}
	}
	if err != nil {
		e.mu.Unlock()
		discard()
		msg := err.Error()
		ps.lastErr.Store(&msg)
		e.log.Warn("plugin restart failed; retrying", "plugin", ps.name, "error", err)
		return false
	}
	ps.retired = append(ps.retired, old.lanes...)
	ps.cur.Store(r)
	ps.rails.Store(r.rails)
	ps.lastErr.Store(nil)
	ps.restarts.Add(1)
	ps.down.Store(false)
	e.path.changes.changed()
	e.startRun(ps, r)
	e.mu.Unlock()
	if err := e.publish(ctx); err != nil { // its endpoint may have changed
		e.log.Warn("descriptor not republished after plugin restart", "plugin", ps.name, "error", err)
	}
	e.log.Info("plugin restarted", "plugin", ps.name, "pid", r.p.PID(), "restarts", ps.restarts.Load())
	return true
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
	// Outstanding is how many descriptors the current run holds:
	// submitted to its lanes and not completed.
	Outstanding int64 `json:"outstanding"`
	// LastExit says why the previous run ended, "" while the first runs.
	LastExit string     `json:"last_exit,omitempty"`
	Rails    []sdk.Rail `json:"rails,omitempty"`
	Counters map[string]uint64
}

// Plugins reports every configured plugin, with its counters when running.
func (e *Engine) Plugins(ctx context.Context) []PluginStatus {
	var out []PluginStatus
	for _, ps := range e.plugins {
		st := PluginStatus{Name: ps.name, State: "running", Restarts: ps.restarts.Load(), Stalls: ps.stalls.Load()}
		if m := ps.lastExit.Load(); m != nil {
			st.LastExit = *m
		}
		r := ps.run()
		if r != nil {
			st.Rails = r.probe.Rails
			st.Path, st.SHA256, st.Version, st.Protocol = r.p.Path, r.p.SHA256, r.p.Info.Version, r.p.Protocol
		}
		switch {
		case ps.err != nil:
			st.State, st.Reason = "failed", ps.err.Error()
			if r != nil && !r.probe.Available && r.probe.Reason != "" {
				st.State = "unavailable"
			}
		case ps.down.Load():
			st.State, st.Reason = "restarting", st.LastExit
			if m := ps.lastErr.Load(); m != nil {
				st.Reason += "; last restart attempt: " + *m
			}
		default:
			st.PID = r.p.PID()
			for _, l := range r.lanes {
				st.Outstanding += l.InFlight()
			}
			cctx, cancel := context.WithTimeout(ctx, controlTimeout)
			c, err := r.p.Client.Stats(cctx)
			cancel()
			if err == nil {
				st.Counters = c
			}
		}
		out = append(out, st)
	}
	return out
}

// descriptor builds the local descriptor; e.mu held.
func (e *Engine) descriptor() *segment.Descriptor {
	d := &segment.Descriptor{
		Schema: segment.SchemaVersion, Name: e.name, Incarnation: e.incarnation, MachineID: e.machineID,
		Transports: make(map[string][]byte),
	}
	for _, lb := range *e.local.Load() {
		d.Buffers = append(d.Buffers, lb.Buffer)
	}
	d.Topology = e.topo
	for _, ps := range e.plugins {
		if ps.usable() {
			d.Transports[ps.name] = ps.run().endpoint
			if rs := ps.run().rails; rs != nil {
				if d.Rails == nil {
					d.Rails = make(map[string][]segment.RailInfo)
				}
				for _, r := range rs.info {
					d.Rails[ps.name] = append(d.Rails[ps.name], segment.RailInfo{Name: r.Name, Label: r.Label, NUMANode: r.NUMANode, BandwidthGbps: r.NominalGbps})
				}
			}
		}
	}
	if e.hc != nil {
		d.Control = e.hc.srv.Addr()
	}
	return d
}

// publish writes the local descriptor to the metastore, bound to a lease
// that the metastore keeps alive while this engine runs: a dead engine's
// descriptor expires within the configured TTL.
func (e *Engine) publish(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	b, err := e.descriptor().Encode()
	if err != nil {
		return err
	}
	key := segment.Key(e.keyPrefix, e.name)
	cctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	if e.lease != nil {
		if err := e.lease.Update(cctx, b); err != nil {
			// The lease keeps the new value and writes it when the
			// metastore answers again: an outage must not fail a
			// Register, only delay what peers learn of it.
			err = fmt.Errorf("engine %q: publish descriptor %q: %w", e.name, key, err)
			e.setHealth(err)
			select {
			case e.healthPoke <- struct{}{}:
			default:
			}
			e.log.Warn("descriptor not published yet; it is written when the metastore returns", "error", err)
		}
		return nil
	}
	if err := e.claimName(cctx, key); err != nil {
		return err
	}
	e.lease, err = e.meta.PutLeased(cctx, key, b, e.cfg.Metastore.LeaseTTL())
	if err != nil {
		return fmt.Errorf("engine %q: publish descriptor %q: %w", e.name, key, err)
	}
	e.wg.Add(1)
	go e.watchLease(e.lease, key)
	return nil
}

// MetastoreHealth returns nil while the engine's descriptor is kept alive
// in the metastore, and the latest error while it cannot be (the
// metastore is unreachable or lost the lease). Transfers to peers already
// open go on meanwhile; the error clears once the descriptor is back.
func (e *Engine) MetastoreHealth() error {
	if p := e.health.Load(); p != nil {
		return *p
	}
	return nil
}

func (e *Engine) setHealth(err error) {
	if err == nil {
		e.health.Store(nil)
		return
	}
	e.health.Store(&err)
}

// claimName makes sure publishing under key takes over no live engine's
// name: its peers would send this engine writes meant for it. A
// descriptor left by an engine that no longer answers on its control
// address (it crashed and is being restarted) is taken over at once
// rather than after its lease expires. Two engines racing to start under
// one name can still both pass; names are the operator's to keep unique.
func (e *Engine) claimName(ctx context.Context, key string) error {
	raw, err := e.meta.Get(ctx, key)
	if errors.Is(err, metastore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("engine %q: check descriptor %q: %w", e.name, key, err)
	}
	d, err := segment.Decode(key, raw)
	if err != nil {
		return fmt.Errorf("%w: engine %q: key %q holds something that is not a Ferry descriptor (%v); refusing to overwrite it: remove the key or pick another name", ErrInvalid, e.name, key, err)
	}
	if d.Incarnation == e.incarnation || !e.answers(ctx, d) {
		return nil
	}
	return fmt.Errorf("%w: engine %q: the name is in use by a live engine (incarnation %#x on machine %q, control %s, key %q); pick another name",
		ErrInvalid, e.name, d.Incarnation, d.MachineID, d.Control, key)
}

// answers reports whether the engine that published d still answers a
// ping as that incarnation. Without a control address it is assumed alive
// until its lease expires.
func (e *Engine) answers(ctx context.Context, d *segment.Descriptor) bool {
	if d.Control == "" {
		return true
	}
	c, err := control.Dial(d.Control)
	if err != nil {
		return false
	}
	defer c.Close()
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	name, inc, err := c.Ping(pctx)
	return err == nil && name == d.Name && inc == d.Incarnation
}

// watchLease records and logs metastore trouble the lease reports; the
// lease itself retries and puts the descriptor back when the metastore
// returns. The lease reports only failures, so while it is failing the
// descriptor is read back every ttl/3 to learn that it recovered.
func (e *Engine) watchLease(l metastore.Lease, key string) {
	defer e.wg.Done()
	interval := e.cfg.Metastore.LeaseTTL() / 3
	var ticker *time.Ticker
	var tick <-chan time.Time
	defer func() {
		if ticker != nil {
			ticker.Stop()
		}
	}()
	errc := l.Err()
	for {
		select {
		case err, ok := <-errc:
			if !ok {
				return // the lease stopped: Close
			}
			e.setHealth(err)
			e.log.Warn("metastore unreachable; transfers to known peers go on, the descriptor is refreshed when it returns", "error", err)
			if ticker == nil {
				ticker = time.NewTicker(interval)
				tick = ticker.C
			}
		case <-e.healthPoke:
			if ticker == nil {
				ticker = time.NewTicker(interval)
				tick = ticker.C
			}
		case <-tick:
			if e.published(key, interval) {
				e.setHealth(nil)
				e.log.Info("metastore back; descriptor published again", "key", key)
				ticker.Stop()
				ticker, tick = nil, nil
			}
		}
	}
}

// published reports whether the metastore holds this incarnation's
// descriptor under key.
func (e *Engine) published(key string, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	raw, err := e.meta.Get(ctx, key)
	if err != nil {
		return false
	}
	d, err := segment.Decode(key, raw)
	return err == nil && d.Incarnation == e.incarnation
}

// Close stops the engine: unpublishes its descriptor, stops its plugins,
// fails what is still pending, and frees its memory. Safe to call twice.
func (e *Engine) Close() error {
	var errs []error
	e.closeOnce.Do(func() {
		e.closed.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
		defer cancel()
		e.mu.Lock()
		lease := e.lease
		e.mu.Unlock()
		if lease != nil {
			if err := lease.Close(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		e.stopControl()
		close(e.quit)
		// Failovers in progress give up (they watch quit) or finish
		// submitting; none starts from here on.
		e.retryMu.Lock()
		e.retryClosed = true
		e.retryMu.Unlock()
		e.retrying.Wait()
		// A restart publishes its run under e.mu after checking closed:
		// from here on the runs read below are the last ones.
		e.mu.Lock()
		e.mu.Unlock()
		for _, ps := range e.plugins {
			r := ps.run()
			if r == nil {
				continue
			}
			if ps.err == nil && !ps.down.Load() {
				if err := r.p.Client.Stop(ctx); err != nil {
					e.log.Warn("plugin stop failed", "plugin", ps.name, "error", err)
				}
			}
			for _, l := range r.lanes {
				l.MarkDown()
			}
		}
		closeErr := fmt.Errorf("%w: engine %q closed", ErrClosed, e.name)
		for _, ps := range e.plugins {
			e.tracker.FailTransport(ps.idx, closeErr)
		}
		for _, ps := range e.plugins {
			if p := ps.proc(); p != nil {
				p.Kill()
			}
		}
		for _, ps := range e.plugins {
			var lanes []*progress.Lane
			if r := ps.run(); r != nil && ps.err == nil {
				lanes = r.lanes
			}
			e.mu.Lock()
			lanes = append(lanes, ps.retired...)
			ps.retired = nil
			e.mu.Unlock()
			for _, l := range lanes {
				l.Close(true) // stops and waits for its reaper, then unmaps
			}
		}
		e.wg.Wait()
		e.mu.Lock()
		for _, a := range e.allocs {
			a.region.Close()
		}
		e.allocs = nil
		e.mu.Unlock()
		if e.meta != nil {
			if err := e.meta.Close(); err != nil {
				errs = append(errs, err)
			}
		}
	})
	return errors.Join(errs...)
}

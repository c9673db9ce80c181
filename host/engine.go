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

	hclog "github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host/admission"
	"github.com/ferrydev/ferry/host/device"
	"github.com/ferrydev/ferry/host/exposure"
	"github.com/ferrydev/ferry/host/loader"
	"github.com/ferrydev/ferry/host/localmem"
	"github.com/ferrydev/ferry/host/metastore"
	"github.com/ferrydev/ferry/host/metrics"
	"github.com/ferrydev/ferry/host/notify"
	"github.com/ferrydev/ferry/host/observe"
	"github.com/ferrydev/ferry/host/path"
	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/host/publish"
	"github.com/ferrydev/ferry/host/remotes"
	"github.com/ferrydev/ferry/host/segment"
	"github.com/ferrydev/ferry/host/supervisor"
	"github.com/ferrydev/ferry/host/topology"
	"github.com/ferrydev/ferry/host/trace"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// controlTimeout bounds one control call to a plugin.
const controlTimeout = path.ControlTimeout

// Option adjusts an Engine at New.
type Option func(*options)

type options struct {
	logger     hclog.Logger
	path       path.Options          // the request path's listeners and admitter
	metricsReg prometheus.Registerer // see metrics.go
	locked     bool                  // see locked.go
}

// WithObserver attaches o to the request path: it sees every stage
// transition of every task (see observe.Stage). An engine has one
// observer; one that fans out to several is the caller's.
func WithObserver(o observe.Observer) Option { return func(op *options) { op.path.Observer = o } }

// WithAdmitter puts a in the request path's admission stage, in place of
// the pass-through that admits every request now.
func WithAdmitter(a admission.Admitter) Option { return func(op *options) { op.path.Admit = a } }

// WithLogger sends the engine's and its plugins' logs to l.
func WithLogger(l hclog.Logger) Option { return func(o *options) { o.logger = l } }

// Engine is one Ferry endpoint: its own segment, its plugins, and its view
// of remote segments. Methods are safe for concurrent use.
type Engine struct {
	cfg         *config.Config
	log         hclog.Logger
	name        string
	incarnation uint64
	machineID   string

	// x runs the request path: every task, its plugins' lanes, failover,
	// admission and credit (host/path). The engine wires it.
	x          *path.Executor
	tracker    *progress.Tracker
	supervisor *supervisor.Set   // launches, watches and restarts the plugins
	meter      *metrics.Meter    // nil without metrics; see metrics.go
	metricsX   *metrics.Exporter // serves meter; nil without metrics
	trace      *trace.Recorder   // nil without a trace block
	admitter   string            // the Admitter's type, for status

	meta      metastore.Backend
	metaURL   string // of the embedded or HTTP metastore, "" otherwise
	keyPrefix string
	pub       *publish.Publisher // our descriptor, kept alive while we run; see presence.go

	topo *segment.Topology // this machine, from sysfs; published

	hc *notify.Service // the control service for peers; see notify.go
	// controlAddr is hc's address as peers can use it (controladdr.go),
	// published in the descriptor; set once by startControl.
	controlAddr string

	// mu serialises what a plugin restart must see whole: registrations
	// (mem's writers), open segments, publishing.
	mu   sync.Mutex
	mem  *localmem.Table    // allocations and registered buffers; see memory.go
	devs *device.Set        // device plugins and device memory; see devices.go
	segs *remotes.Table     // open remote segments; see segments.go
	dir  *remotes.Directory // opens, follows and rechecks them, under mu
	// signer signs the local descriptor and checks peers'; nil without
	// a cluster secret.
	signer *segment.Signer
	// secret is the cluster secret, nil without one; see secret.go.
	secret []byte
	// unwatch stops dir's metastore watch.
	unwatch   context.CancelFunc
	closeOnce sync.Once
	wg        sync.WaitGroup // dir's metastore watch, and the control clients' pruning
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
		tracker:     progress.NewTracker(0),
	}
	if e.machineID == "" {
		e.machineID = config.DefaultMachineID()
	}
	e.topo = topology.Discover(topology.Root, interfaceAddrs)
	e.mem = localmem.New(cfg.Name, controlTimeout)
	e.segs = remotes.New(e.machineID, controlTimeout)
	sv := cfg.Supervise.WithDefaults()
	e.supervisor = supervisor.New(supervisor.Config{
		Lanes: cfg.Transfer.Lanes, RingDepth: cfg.Transfer.RingDepth, Spin: cfg.Transfer.Spin, SpinSmall: cfg.Transfer.SpinSmall, StreamPause: cfg.Transfer.StreamPause,
		HandoffSleeps:  cfg.Transfer.HandoffSleeps,
		Stall:          supervisor.Stall{Off: sv.Off, Interval: sv.Interval, After: sv.StallAfter, ProbeTimeout: sv.ProbeTimeout},
		Contract:       supervisor.Contract{Violations: uint64(sv.ContractViolations), Within: sv.ContractWindow},
		EndGrace:       sv.EndGrace,
		Backoff:        supervisor.DefaultBackoff,
		ControlTimeout: controlTimeout,
		Tracker:        e.tracker,
		Log:            e.log,
	})
	e.meter = newMeter(cfg, o.metricsReg)
	o.path.Meter = e.meter
	if cfg.Trace.Keep > 0 {
		e.trace = trace.New(cfg.Trace.Keep, cfg.Trace.SampleEvery)
		o.path.Trace = e.trace
	}
	e.admitter = "pass-through"
	if _, pass := o.path.Admit.(admission.PassThrough); o.path.Admit != nil && !pass {
		e.admitter = fmt.Sprintf("%T", o.path.Admit)
	}
	e.devs = e.newDevices()
	x, err := path.New(path.Deps{Config: cfg, Log: e.log, Incarnation: e.incarnation, MachineID: e.machineID, Locked: o.locked,
		Tracker: e.tracker, Supervisor: e.supervisor, Mem: e.mem, Segs: e.segs, Devices: e.devs, Options: o.path,
		Recheck: func(ctx context.Context, rem *remote, st ring.Status, err error, checked map[SegmentID]string) error {
			return recheck(ctx, e.dir, rem, st, err, checked)
		},
		Reread: func(ctx context.Context, rem *remote) (bool, error) { return e.dir.Reread(ctx, rem) }})
	if err != nil {
		return nil, err
	}
	e.x = x
	if err := e.openMetastore(ctx); err != nil {
		return nil, err
	}
	for _, pc := range cfg.Plugins {
		if pc.Enabled {
			e.startPlugin(ctx, pc)
		}
	}
	if err := checkStarted(cfg, e.x.Plugins(), e.log); err != nil {
		e.Close()
		return nil, err
	}
	err = e.x.Start()
	if err == nil {
		err = checkPolicyRails(cfg.Policies, e.x.Plugin)
	}
	if err != nil {
		e.Close()
		return nil, err
	}
	if err := e.startControl(); err != nil {
		e.Close()
		return nil, err
	}
	e.x.Serve(e.hc)
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		e.hc.PruneWhile(e.x.Quit(), e.segs.Changed, e.segs.Controls, controlIdle)
	}()
	wctx, unwatch := context.WithCancel(context.Background())
	e.unwatch = unwatch
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		e.dir.Follow(wctx)
	}()
	if err := e.publish(ctx); err != nil {
		e.Close()
		return nil, err
	}
	if e.meter != nil {
		e.metricsX, err = startMetrics(cfg, e.log, metrics.Config{
			Meter: e.meter, Source: metricsSource{x: e.x, segs: e.segs, dir: e.dir, pub: e.pub, signer: e.signer}, Registerer: o.metricsReg,
			Listen: cfg.Metrics.Listen, PluginTimeout: cfg.Metrics.PluginWait(), ConstLabels: prometheus.Labels{"engine": e.name},
			QoS: e.x.QoSMetrics,
		})
		if err != nil {
			e.Close()
			return nil, err
		}
	}
	if e.secret == nil {
		e.log.Warn(exposure.Warning(exposure.Of(cfg, e.metaURL, e.controlAddr)), "engine", e.name)
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
	signer, err := openSigner(secret, e.cfg)
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
		// err says "metastore: ..."; before it, where the file sets the address.
		at := e.cfg.MetastoreField()
		if w := e.cfg.Where(at); w != "" {
			at = w + ": " + at
		}
		return fmt.Errorf("%s: engine %q: %w", at, e.name, err)
	}
	e.meta = b
	fetch := &remotes.Fetcher{Store: b, Prefix: e.keyPrefix, Log: e.log, Timeout: controlTimeout, Signer: e.signer,
		// peer-to-peer mode: the control service, started later, asks
		Peer: func(ctx context.Context, addr string) ([]byte, error) { return e.hc.PeerDescriptor(ctx, addr) },
	}
	if m.Kind == config.MetastoreNone {
		fetch.Store = nil // peer-to-peer only
	}
	e.dir = remotes.NewDirectory(remotes.DirectoryConfig{Table: e.segs, Fetch: fetch, Watcher: b, Lock: &e.mu, Transports: e.peerPorts, Log: e.log})
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

// startPlugin has the supervisor start one plugin, through the request
// path (path.Executor.StartPlugin), with the engine's part of its
// restarts: replaying registrations and open peers, republishing.
func (e *Engine) startPlugin(ctx context.Context, pc config.Plugin) {
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
	e.x.StartPlugin(ctx, pc.Name, spec, path.Lifecycle{
		// A restart's run r of ps comes back to where the previous one
		// was: every registered region (same ids) and every open peer
		// (same ids) again, under e.mu.
		Replay: func(ctx context.Context, ps *path.Plugin, r *supervisor.Run, commit func() bool) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			if e.x.Closed() {
				return supervisor.ErrStopped
			}
			if err := e.mem.Replay(ctx, pluginPort{name: ps.Name(), p: r.Proc}); err != nil {
				return err
			}
			if err := e.replayDevices(ctx, r.Proc); err != nil {
				return err
			}
			// This engine's own segment is opened where the new run
			// listens, not where the metastore still says: it knows.
			own := func(h *remotes.Handle) ([]byte, bool) {
				return r.Endpoint, h.Name == e.name && h.Desc.Incarnation == e.incarnation
			}
			if err := e.segs.Replay(ctx, int(ps.Index()), ps.Name(), r.Proc.Client.OpenPeer, own); err != nil {
				return err
			}
			if !commit() {
				return supervisor.ErrStopped
			}
			return nil
		},
		Restarted: func(ctx context.Context, ps *path.Plugin, _ *supervisor.Run) {
			if err := e.publish(ctx); err != nil { // its endpoint may have changed
				e.log.Warn("descriptor not republished after plugin restart", "plugin", ps.Name(), "error", err)
			}
		},
	})
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

// Close stops the engine: unpublishes its descriptor, stops its plugins,
// fails what is still pending, and frees its memory. Safe to call twice.
func (e *Engine) Close() error {
	var errs []error
	e.closeOnce.Do(func() {
		if e.metricsX != nil {
			e.metricsX.Close() // first: no scrape reads a closing engine
		}
		e.x.Closing()       // no task is taken on; waits and failovers give up
		e.supervisor.Quit() // no plugin exit is acted on, no restart starts
		ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
		defer cancel()
		if e.pub != nil {
			if err := e.pub.Close(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		if e.hc != nil {
			// Stops sending, then serving, then closes the channel of
			// received notifications: a reader of Notifications() drains
			// what was delivered and sees it closed. Pending
			// SubmitWithNotify notifications are not sent.
			e.hc.Close()
		}
		if e.unwatch != nil {
			e.unwatch() // e.wg.Wait below waits for the watch to end
		}
		// Quit above made the supervisor refuse to commit restarted runs:
		// the runs it stops here are the last ones.
		e.supervisor.Stop(ctx)
		e.x.Close()
		e.supervisor.Close() // kills the processes, unmaps the lanes, waits
		e.x.WaitClosed()
		e.devs.Close() // after the staged requests, which copy through them, ended
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

// WithStage adds s to the request path, after admission and before
// routing; stages added so run in the order of their options. See
// path.Stage.
func WithStage(s path.Stage) Option {
	return func(o *options) { o.path.Stages = append(o.path.Stages, s) }
}

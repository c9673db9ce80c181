package host

import (
	"context"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrydev/ferry/host/metastore"
	"github.com/ferrydev/ferry/host/metrics"
	"github.com/ferrydev/ferry/host/path"
	"github.com/ferrydev/ferry/host/publish"
	"github.com/ferrydev/ferry/host/rails"
	"github.com/ferrydev/ferry/host/remotes"
	"github.com/ferrydev/ferry/host/segment"
)

// Metrics. With a metrics block (metrics { listen = "127.0.0.1:9464" })
// or WithMetricsRegistry, the request path adds to a metrics.Meter as
// its tasks move (path.go: note and pathWatcher; not through the
// observer, whose events cost more than the counting), and the engine
// exports it with a collector of its plugins, rails, segments and
// metastore health (host/metrics). Series carry an engine label, the
// engine's name; none carries a peer.

// WithMetricsRegistry registers the engine's metrics into reg, an
// application's own registry, when Ferry is embedded. The metrics block's
// listen, when the configuration also has one, serves reg, which must
// then be a prometheus.Gatherer (a *prometheus.Registry is). Close
// unregisters them. Two engines in one registry need different names.
func WithMetricsRegistry(reg prometheus.Registerer) Option {
	return func(o *options) { o.metricsReg = reg }
}

// metricsOn reports whether the engine exports metrics.
func (e *Engine) metricsOn(o *options) bool { return e.cfg.Metrics.Listen != "" || o.metricsReg != nil }

// attachMetrics gives the request path its meter; New calls it before
// wiring the path.
func (e *Engine) attachMetrics(o *options) {
	if !e.metricsOn(o) {
		return
	}
	var names []string
	for _, pc := range e.cfg.Plugins { // the order New starts them in: plugin indices
		if pc.Enabled {
			names = append(names, pc.Name)
		}
	}
	e.meter = metrics.NewMeter(names, prometheus.Labels{"engine": e.name})
	o.path.Meter = e.meter
}

// startMetrics registers the engine's metrics and serves them; New
// calls it last, once the engine is whole (a scrape reads its plugins).
func (e *Engine) startMetrics(o *options) error {
	if e.meter == nil {
		return nil
	}
	listen := e.cfg.Metrics.Listen
	x, err := metrics.Start(metrics.Config{
		Meter: e.meter, Source: metricsSource{x: e.x, segs: e.segs, pub: e.pub, signer: e.signer, watch: e.segWatch}, Registerer: o.metricsReg,
		Listen: listen, PluginTimeout: e.cfg.Metrics.PluginWait(), ConstLabels: prometheus.Labels{"engine": e.name},
		QoS: e.x.QoSMetrics,
	})
	if err != nil {
		at := "metrics.listen"
		if w := e.cfg.Where("metrics.listen"); w != "" {
			at = w + ": " + at
		}
		return fmt.Errorf("%w: engine %q: %s: %w; choose a free address, or stop what listens on %s", ErrInvalid, e.name, at, err, listen)
	}
	e.metricsX = x
	if a := x.Addr(); a != "" {
		e.log.Info("serving metrics", "address", "http://"+a+metrics.Path)
	}
	return nil
}

// stopMetrics stops serving and unregisters; Close calls it first, so
// that no scrape reads a closing engine.
func (e *Engine) stopMetrics() {
	if e.metricsX != nil {
		e.metricsX.Close()
	}
}

// MetricsAddr returns the address the engine serves /metrics on, "" when
// it serves none.
func (e *Engine) MetricsAddr() string {
	if e.metricsX == nil {
		return ""
	}
	return e.metricsX.Addr()
}

// metricsSource is what a scrape reads of the engine: the parts that
// Status reads, without a pointer to the whole engine. The collector
// asks the plugins (Plugins) once per read.
type metricsSource struct {
	x      *path.Executor
	segs   *remotes.Table
	pub    *publish.Publisher
	signer *segment.Signer
	watch  *metastore.Rewatch // the segments', nil without a metastore
}

func (s metricsSource) Plugins(ctx context.Context) []metrics.Plugin {
	var out []metrics.Plugin
	for _, st := range pluginStatuses(ctx, s.x.Plugins(), true) {
		out = append(out, metrics.Plugin{
			Name: st.Name, State: st.State, Restarts: st.Restarts, Stalls: st.Stalls, Faulty: st.Faulty,
			Outstanding: st.Outstanding, Counters: st.Counters,
		})
	}
	return out
}

func (s metricsSource) Rails() []rails.Status { return railStatuses(s.x.Plugins()) }

func (s metricsSource) Segments() metrics.Segments {
	c := s.segs.Counts()
	return metrics.Segments{Open: c.Open, Retired: c.Retired, Gone: c.Gone, Opened: c.Opened, Retirements: c.Retirements}
}

func (s metricsSource) Metastore() metrics.Metastore {
	m := metrics.Metastore{Err: s.pub.Health(), Refused: s.signer.Refused(), Repairs: s.pub.Repaired()}
	for _, w := range metastoreWatches(s.watch, s.pub) {
		m.Watches = append(m.Watches, metrics.MetastoreWatch{Name: strings.ReplaceAll(w.Name, " ", "_"), Up: w.Watching})
	}
	return m
}

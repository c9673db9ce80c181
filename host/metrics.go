package host

import (
	"context"
	"fmt"
	"strings"

	hclog "github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrydev/ferry/config"
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

// newMeter returns the meter the request path adds to, nil when the
// engine exports no metrics (no metrics block, no registry).
func newMeter(cfg *config.Config, reg prometheus.Registerer) *metrics.Meter {
	if cfg.Metrics.Listen == "" && reg == nil {
		return nil
	}
	var names []string
	for _, pc := range cfg.Plugins { // the order New starts them in: plugin indices
		if pc.Enabled {
			names = append(names, pc.Name)
		}
	}
	return metrics.NewMeter(names, prometheus.Labels{"engine": cfg.Name})
}

// startMetrics registers the engine's metrics and serves them (c); New
// calls it last, once the engine is whole (a scrape reads its plugins),
// and Close stops it first, so that no scrape reads a closing engine.
func startMetrics(cfg *config.Config, log hclog.Logger, c metrics.Config) (*metrics.Exporter, error) {
	x, err := metrics.Start(c)
	if err != nil {
		at := "metrics.listen"
		if w := cfg.Where("metrics.listen"); w != "" {
			at = w + ": " + at
		}
		return nil, fmt.Errorf("%w: engine %q: %s: %w; choose a free address, or stop what listens on %s", ErrInvalid, cfg.Name, at, err, c.Listen)
	}
	if a := x.Addr(); a != "" {
		log.Info("serving metrics", "address", "http://"+a+metrics.Path)
	}
	return x, nil
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
	dir    *remotes.Directory
}

func (s metricsSource) Plugins(ctx context.Context) []metrics.Plugin {
	var out []metrics.Plugin
	for _, st := range pluginStatuses(ctx, s.x.Plugins(), true) {
		out = append(out, metrics.Plugin{
			Name: st.Name, State: st.State, Restarts: st.Restarts, Stalls: st.Stalls, Faulty: st.Faulty,
			Upgrades: st.Upgrades, UpgradesFailed: st.UpgradesFailed, Outstanding: st.Outstanding, Counters: st.Counters,
			ServedKnown: st.ServedKnown,
		})
		for _, v := range st.Served {
			out[len(out)-1].Served = append(out[len(out)-1].Served, metrics.Served(v))
		}
	}
	return out
}

func (s metricsSource) Rails() []rails.Status { return path.RailStatuses(s.x.Plugins()) }

func (s metricsSource) Segments() metrics.Segments {
	c := s.segs.Counts()
	return metrics.Segments{Open: c.Open, Retired: c.Retired, Gone: c.Gone, Opened: c.Opened, Retirements: c.Retirements}
}

func (s metricsSource) Metastore() metrics.Metastore {
	m := metrics.Metastore{Err: s.pub.Health(), Refused: s.signer.Refused(), Repairs: s.pub.Repaired()}
	for _, w := range metastoreWatches(s.dir, s.pub) {
		m.Watches = append(m.Watches, metrics.MetastoreWatch{Name: strings.ReplaceAll(w.Name, " ", "_"), Up: w.Watching})
	}
	return m
}

package metrics

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrydev/ferry/host/rails"
)

// Source is what the collector reads of an engine when scraped. Package
// host implements it over the Engine; tests hand in plain data.
type Source interface {
	// Plugins reports every configured plugin. It may ask running
	// plugins for their counters, within ctx.
	Plugins(ctx context.Context) []Plugin
	// Rails reports every rail of every running transport.
	Rails() []rails.Status
	// Segments reports the open remote segments and their lifecycle.
	Segments() Segments
	// Metastore reports the engine's hold on its metastore entry.
	Metastore() Metastore
}

// Plugin is one plugin as the collector exports it.
type Plugin struct {
	Name string
	// State is "running", "restarting", "unavailable", "failed", ...
	State                    string
	Restarts, Stalls, Faulty uint64
	// Upgrades and UpgradesFailed count its live upgrades: committed,
	// and refused (the new binary did not start; the old one serves).
	Upgrades, UpgradesFailed uint64
	// Outstanding is how many descriptors the current run holds.
	Outstanding int64
	// Counters are the plugin's own (sdk Stats) less its served ones;
	// nil when it did not answer (or is not running).
	Counters map[string]uint64
	// Served is what it served its peers (SplitServed); ServedKnown says
	// it counts that at all.
	Served      []Served
	ServedKnown bool
}

// Segments is the engine's open remote segments: how many are open now,
// how many of those are retired (their peer restarted: open them again)
// or gone from the metastore, and counts since the engine started.
type Segments struct {
	Open, Retired, Gone int
	// Opened counts handles opened; Retirements, handles retired because
	// the peer came back with a new incarnation (each one an incarnation
	// change seen).
	Opened, Retirements uint64
}

// Metastore is the engine's hold on its descriptor in the metastore.
type Metastore struct {
	// Err is nil while the descriptor is kept alive.
	Err error
	// Refused counts peer descriptors refused as unsigned or badly
	// signed; Repairs, writes of our own descriptor back after someone
	// else replaced or deleted it.
	Refused, Repairs uint64
	// Watches are the engine's metastore watches.
	Watches []MetastoreWatch
}

// MetastoreWatch is one metastore watch: Up while it runs, false while
// it is retried.
type MetastoreWatch struct {
	Name string
	Up   bool
}

// Bounds on what a plugin's Stats may add to a scrape: more counters, or
// longer names, are dropped (and counted), so that a plugin cannot grow
// the engine's series without bound.
const (
	MaxPluginCounters  = 64
	MaxPluginCounterNm = 64
)

// DefaultPluginTimeout bounds how long a scrape waits for the plugins'
// counters.
const DefaultPluginTimeout = time.Second

// Collector exports a Source's state on every scrape. Plugins are read
// by one goroutine at a time, bounded by a timeout: a scrape that does
// not get them in time (a plugin restarting or stalled) exports the
// last ones it got and counts the miss, and never fails or waits longer.
type Collector struct {
	src     Source
	timeout time.Duration

	ctx    context.Context // canceled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the plugin reader

	mu      sync.Mutex
	reading chan struct{} // closed when the running read ends; nil when none runs
	last    []Plugin      // of the last read that ended

	timeouts prometheus.Counter
	dropped  prometheus.Counter

	pluginUp, pluginState, pluginRestarts, pluginStalls, pluginFaulty, pluginOutstanding, pluginCounter *prometheus.Desc
	pluginUpgrades                                                                                      *prometheus.Desc
	railBytes, railSlices, railErrors, railInFlight, railPaused, railGbps                               *prometheus.Desc
	segOpen, segOpened, segRetired                                                                      *prometheus.Desc
	metaUp, metaRefused, metaRepairs, metaWatchUp                                                       *prometheus.Desc
	credit                                                                                              creditDescs // credit.go
	served                                                                                              servedDescs // served.go
}

// NewCollector returns a collector of src whose series carry
// constLabels; timeout bounds a scrape's wait for the plugins (0:
// DefaultPluginTimeout). Close stops it.
func NewCollector(src Source, timeout time.Duration, constLabels prometheus.Labels) *Collector {
	if timeout <= 0 {
		timeout = DefaultPluginTimeout
	}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, constLabels)
	}
	c := &Collector{
		src: src, timeout: timeout,
		timeouts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "metrics_plugin_read_timeouts_total", ConstLabels: constLabels,
			Help: "Scrapes that did not get the plugins' state within the timeout (a plugin restarting or stalled) and exported the last one read."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "metrics_plugin_counters_dropped_total", ConstLabels: constLabels,
			Help: "Plugin counters left out of a scrape: beyond the first 64 of a plugin, or named by more than 64 bytes."}),

		pluginUp:          d("plugin_up", "1 while the plugin runs, 0 otherwise.", "plugin"),
		pluginState:       d("plugin_state", "1 for the plugin's current state (running, restarting, unavailable, failed, ...).", "plugin", "state"),
		pluginRestarts:    d("plugin_restarts_total", "Runs of the plugin started after the first.", "plugin"),
		pluginStalls:      d("plugin_stalls_total", "Runs of the plugin found stalled and killed.", "plugin"),
		pluginFaulty:      d("plugin_faulty_total", "Runs of the plugin found breaking the completion contract and killed.", "plugin"),
		pluginUpgrades:    d("plugin_upgrades_total", "Live upgrades of the plugin: result ok (the new binary serves) or failed (it did not start; the old one serves).", "plugin", "result"),
		pluginOutstanding: d("plugin_outstanding_descriptors", "Descriptors the plugin's current run holds: submitted and not completed.", "plugin"),
		pluginCounter:     d("plugin_stat", "A figure the plugin reports of itself (sdk Stats: its counters), as it reports it.", "plugin", "stat"),

		railBytes:    d("rail_bytes_total", "Bytes of slices that completed on the rail (reset when a restarted plugin probes other rails).", "transport", "rail"),
		railSlices:   d("rail_slices_total", "Slices that completed on the rail.", "transport", "rail"),
		railErrors:   d("rail_errors_total", "Slices that failed on the rail.", "transport", "rail"),
		railInFlight: d("rail_in_flight_bytes", "Bytes sent on the rail and not yet done.", "transport", "rail"),
		railPaused:   d("rail_paused", "1 while the rail is paused after errors.", "transport", "rail"),
		railGbps:     d("rail_bandwidth_gbps", "The rail's learnt bandwidth (EWMA), gigabits per second.", "transport", "rail"),

		segOpen:    d("segments", "Open remote segments: live, retired (the peer restarted; open it again) or gone (its descriptor left the metastore).", "state"),
		segOpened:  d("segments_opened_total", "Remote segment handles opened."),
		segRetired: d("segment_incarnation_changes_total", "Remote segment handles retired because their peer came back with a new incarnation."),

		metaUp:      d("metastore_up", "1 while the engine's descriptor is kept alive in the metastore."),
		metaRefused: d("descriptors_refused_total", "Peer descriptors refused as unsigned or badly signed."),
		metaRepairs: d("publish_repairs_total", "Times the engine wrote its descriptor back after someone else replaced or deleted it."),
		metaWatchUp: d("metastore_watch_up", "1 while the metastore watch runs, 0 while it is retried: segments (peers' changes) or own_descriptor (the guard of the engine's key).", "watch"),
	}
	c.credit = newCreditDescs(d)
	c.served = newServedDescs(d)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c
}

// Close stops the collector: a plugin read in progress is canceled and
// waited for.
func (c *Collector) Close() {
	c.cancel()
	c.wg.Wait()
}

// Describe sends every series' description.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.pluginUp, c.pluginState, c.pluginRestarts, c.pluginStalls, c.pluginFaulty, c.pluginUpgrades, c.pluginOutstanding, c.pluginCounter,
		c.railBytes, c.railSlices, c.railErrors, c.railInFlight, c.railPaused, c.railGbps,
		c.segOpen, c.segOpened, c.segRetired, c.metaUp, c.metaRefused, c.metaRepairs, c.metaWatchUp} {
		ch <- d
	}
	c.credit.describe(ch)
	c.served.describe(ch)
	c.timeouts.Describe(ch)
	c.dropped.Describe(ch)
}

// Collect reads the source and sends its series.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ps := c.plugins()
	for _, p := range ps {
		c.collectPlugin(ch, p)
	}
	seen := map[[2]string]bool{}
	type railAt struct {
		transport string
		index     int
	}
	names, indices := map[railAt]string{}, map[string][]int{}
	for _, r := range c.src.Rails() {
		rail := r.Name
		if r.Label != "" {
			rail = r.Label
		}
		if k := [2]string{r.Transport, rail}; seen[k] { // two rails named alike would fail the scrape
			rail = fmt.Sprintf("%s#%d", rail, r.Index)
		} else {
			seen[k] = true
		}
		names[railAt{r.Transport, r.Index}] = rail
		indices[r.Transport] = append(indices[r.Transport], r.Index)
		ch <- prometheus.MustNewConstMetric(c.railBytes, prometheus.CounterValue, float64(r.Bytes), r.Transport, rail)
		ch <- prometheus.MustNewConstMetric(c.railSlices, prometheus.CounterValue, float64(r.Slices), r.Transport, rail)
		ch <- prometheus.MustNewConstMetric(c.railErrors, prometheus.CounterValue, float64(r.Errors), r.Transport, rail)
		ch <- prometheus.MustNewConstMetric(c.railInFlight, prometheus.GaugeValue, float64(r.InFlight), r.Transport, rail)
		ch <- prometheus.MustNewConstMetric(c.railPaused, prometheus.GaugeValue, b2f(r.Paused), r.Transport, rail)
		ch <- prometheus.MustNewConstMetric(c.railGbps, prometheus.GaugeValue, r.EWMAGbps, r.Transport, rail)
	}
	for _, p := range ps {
		c.served.collect(ch, p, indices[p.Name], func(i int) string {
			if n, ok := names[railAt{p.Name, i}]; ok {
				return n
			}
			return fmt.Sprintf("#%d", i) // a rail the plugin serves on and the engine does not list
		})
	}
	s := c.src.Segments()
	ch <- prometheus.MustNewConstMetric(c.segOpen, prometheus.GaugeValue, float64(s.Open-s.Retired-s.Gone), "live")
	ch <- prometheus.MustNewConstMetric(c.segOpen, prometheus.GaugeValue, float64(s.Retired), "retired")
	ch <- prometheus.MustNewConstMetric(c.segOpen, prometheus.GaugeValue, float64(s.Gone), "gone")
	ch <- prometheus.MustNewConstMetric(c.segOpened, prometheus.CounterValue, float64(s.Opened))
	ch <- prometheus.MustNewConstMetric(c.segRetired, prometheus.CounterValue, float64(s.Retirements))
	m := c.src.Metastore()
	ch <- prometheus.MustNewConstMetric(c.metaUp, prometheus.GaugeValue, b2f(m.Err == nil))
	ch <- prometheus.MustNewConstMetric(c.metaRefused, prometheus.CounterValue, float64(m.Refused))
	ch <- prometheus.MustNewConstMetric(c.metaRepairs, prometheus.CounterValue, float64(m.Repairs))
	for _, w := range m.Watches {
		ch <- prometheus.MustNewConstMetric(c.metaWatchUp, prometheus.GaugeValue, b2f(w.Up), w.Name)
	}
	c.credit.collect(ch, c.src)
	c.timeouts.Collect(ch)
	c.dropped.Collect(ch)
}

func (c *Collector) collectPlugin(ch chan<- prometheus.Metric, p Plugin) {
	ch <- prometheus.MustNewConstMetric(c.pluginUp, prometheus.GaugeValue, b2f(p.State == "running"), p.Name)
	if p.State != "" {
		ch <- prometheus.MustNewConstMetric(c.pluginState, prometheus.GaugeValue, 1, p.Name, p.State)
	}
	ch <- prometheus.MustNewConstMetric(c.pluginRestarts, prometheus.CounterValue, float64(p.Restarts), p.Name)
	ch <- prometheus.MustNewConstMetric(c.pluginStalls, prometheus.CounterValue, float64(p.Stalls), p.Name)
	ch <- prometheus.MustNewConstMetric(c.pluginFaulty, prometheus.CounterValue, float64(p.Faulty), p.Name)
	ch <- prometheus.MustNewConstMetric(c.pluginUpgrades, prometheus.CounterValue, float64(p.Upgrades), p.Name, "ok")
	ch <- prometheus.MustNewConstMetric(c.pluginUpgrades, prometheus.CounterValue, float64(p.UpgradesFailed), p.Name, "failed")
	ch <- prometheus.MustNewConstMetric(c.pluginOutstanding, prometheus.GaugeValue, float64(p.Outstanding), p.Name)
	n := 0
	for name, v := range p.Counters {
		if n >= MaxPluginCounters || len(name) > MaxPluginCounterNm {
			c.dropped.Inc()
			continue
		}
		n++
		ch <- prometheus.MustNewConstMetric(c.pluginCounter, prometheus.UntypedValue, float64(v), p.Name, name)
	}
}

// plugins returns the plugins' state: a fresh read when it ends within
// the timeout, else the last one that ended. One read runs at a time; a
// scrape that finds one running waits for it, within its own timeout.
func (c *Collector) plugins() []Plugin {
	c.mu.Lock()
	done := c.reading
	if done == nil && c.ctx.Err() == nil {
		done = make(chan struct{})
		c.reading = done
		c.wg.Add(1)
		go c.read(done)
	}
	c.mu.Unlock()
	if done != nil {
		t := time.NewTimer(c.timeout)
		select {
		case <-done:
		case <-t.C:
			c.timeouts.Inc()
		case <-c.ctx.Done():
		}
		t.Stop()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// read is the plugin reader: it asks the source, within the timeout (the
// source may take longer where a lock is held: then the next scrapes
// keep exporting the last state), and keeps what it got.
func (c *Collector) read(done chan struct{}) {
	defer c.wg.Done()
	ctx, cancel := context.WithTimeout(c.ctx, c.timeout)
	ps := c.src.Plugins(ctx)
	cancel()
	c.mu.Lock()
	c.last, c.reading = ps, nil
	c.mu.Unlock()
	close(done)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

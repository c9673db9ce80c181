package metrics

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/ferrydev/ferry/host/rails"
)

// fakeSource is plain data; Plugins blocks while hold is set, as a
// plugin that is restarting or stalled does.
type fakeSource struct {
	mu      sync.Mutex
	plugins []Plugin
	hold    chan struct{} // Plugins waits on it, ignoring ctx, when set
	calls   int
}

func (f *fakeSource) Plugins(ctx context.Context) []Plugin {
	f.mu.Lock()
	f.calls++
	hold, ps := f.hold, f.plugins
	f.mu.Unlock()
	if hold != nil {
		<-hold
	}
	return ps
}

func (f *fakeSource) Rails() []rails.Status {
	return []rails.Status{
		{Transport: "tcp", Index: 0, Name: "127.0.0.1:1", RailStats: rails.RailStats{Bytes: 100, Slices: 2, Errors: 1, InFlight: 7, EWMAGbps: 1.5}},
		{Transport: "tcp", Index: 1, Name: "127.0.0.1:1", Label: "", RailStats: rails.RailStats{Paused: true}}, // the same name twice
		{Transport: "shm", Index: 0, Name: "shm", Label: "local"},
	}
}

func (f *fakeSource) Segments() Segments {
	return Segments{Open: 3, Retired: 1, Gone: 1, Opened: 4, Retirements: 1}
}

func (f *fakeSource) Metastore() Metastore {
	return Metastore{Err: errors.New("unreachable"), Refused: 2, Repairs: 3,
		Watches: []MetastoreWatch{{Name: "segments", Up: true}, {Name: "own_descriptor"}}}
}

func TestCollector(t *testing.T) {
	many := map[string]uint64{"descriptors": 5, strings.Repeat("x", MaxPluginCounterNm+1): 1}
	src := &fakeSource{plugins: []Plugin{
		{Name: "tcp", State: "running", Restarts: 1, Stalls: 2, Faulty: 3, Outstanding: 4, Counters: many},
		{Name: "fault", State: "restarting"},
	}}
	c := NewCollector(src, time.Second, prometheus.Labels{"engine": "a"})
	defer c.Close()
	want := `
# HELP ferry_plugin_up 1 while the plugin runs, 0 otherwise.
# TYPE ferry_plugin_up gauge
ferry_plugin_up{engine="a",plugin="fault"} 0
ferry_plugin_up{engine="a",plugin="tcp"} 1
# HELP ferry_plugin_restarts_total Runs of the plugin started after the first.
# TYPE ferry_plugin_restarts_total counter
ferry_plugin_restarts_total{engine="a",plugin="fault"} 0
ferry_plugin_restarts_total{engine="a",plugin="tcp"} 1
# HELP ferry_plugin_stat A figure the plugin reports of itself (sdk Stats: its counters), as it reports it.
# TYPE ferry_plugin_stat untyped
ferry_plugin_stat{engine="a",plugin="tcp",stat="descriptors"} 5
# HELP ferry_metrics_plugin_counters_dropped_total Plugin counters left out of a scrape: beyond the first 64 of a plugin, or named by more than 64 bytes.
# TYPE ferry_metrics_plugin_counters_dropped_total counter
ferry_metrics_plugin_counters_dropped_total{engine="a"} 1
# HELP ferry_rail_bytes_total Bytes of slices that completed on the rail (reset when a restarted plugin probes other rails).
# TYPE ferry_rail_bytes_total counter
ferry_rail_bytes_total{engine="a",rail="127.0.0.1:1",transport="tcp"} 100
ferry_rail_bytes_total{engine="a",rail="127.0.0.1:1#1",transport="tcp"} 0
ferry_rail_bytes_total{engine="a",rail="local",transport="shm"} 0
# HELP ferry_rail_paused 1 while the rail is paused after errors.
# TYPE ferry_rail_paused gauge
ferry_rail_paused{engine="a",rail="127.0.0.1:1",transport="tcp"} 0
ferry_rail_paused{engine="a",rail="127.0.0.1:1#1",transport="tcp"} 1
ferry_rail_paused{engine="a",rail="local",transport="shm"} 0
# HELP ferry_segments Open remote segments: live, retired (the peer restarted; open it again) or gone (its descriptor left the metastore).
# TYPE ferry_segments gauge
ferry_segments{engine="a",state="gone"} 1
ferry_segments{engine="a",state="live"} 1
ferry_segments{engine="a",state="retired"} 1
# HELP ferry_segment_incarnation_changes_total Remote segment handles retired because their peer came back with a new incarnation.
# TYPE ferry_segment_incarnation_changes_total counter
ferry_segment_incarnation_changes_total{engine="a"} 1
# HELP ferry_metastore_up 1 while the engine's descriptor is kept alive in the metastore.
# TYPE ferry_metastore_up gauge
ferry_metastore_up{engine="a"} 0
`
	names := []string{"ferry_plugin_up", "ferry_plugin_restarts_total", "ferry_plugin_stat", "ferry_metrics_plugin_counters_dropped_total",
		"ferry_rail_bytes_total", "ferry_rail_paused", "ferry_segments", "ferry_segment_incarnation_changes_total", "ferry_metastore_up"}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
}

// TestScrapeWhilePluginsHang: a scrape while the plugins cannot answer
// (restarting, stalled) neither fails nor waits past the timeout: it
// exports the last state read, counts the miss, and starts no second
// reader while the first still waits.
func TestScrapeWhilePluginsHang(t *testing.T) {
	src := &fakeSource{plugins: []Plugin{{Name: "tcp", State: "running", Restarts: 1}}}
	c := NewCollector(src, 20*time.Millisecond, nil)
	defer c.Close()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	if _, err := reg.Gather(); err != nil { // a good read first
		t.Fatal(err)
	}
	hold := make(chan struct{})
	src.mu.Lock()
	src.hold, src.plugins = hold, nil
	src.mu.Unlock()
	for range 3 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatalf("scrape while the plugins hang: %v", err)
		}
		if got := value(mfs, "ferry_plugin_restarts_total"); got != 1 {
			t.Fatalf("scrape while the plugins hang exports restarts %v, want the last read's 1", got)
		}
	}
	if got := testutil.ToFloat64(c.timeouts); got != 3 {
		t.Errorf("timeouts %v, want 3", got)
	}
	src.mu.Lock()
	calls := src.calls
	src.mu.Unlock()
	if calls != 2 {
		t.Errorf("source read %d times, want 2: one good read, then one reader that every later scrape waits on", calls)
	}
	close(hold) // the reader ends; Close waits for it
}

func value(mfs []*dtoFamily, name string) float64 {
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

// TestPromtoolChecksScrape: the exposition of the observer and the
// collector passes `promtool check metrics` (Debian's prometheus
// package). Without promtool it is skipped, unless CI is set.
func TestPromtoolChecksScrape(t *testing.T) {
	promtool := requireBinary(t, "promtool")
	reg := prometheus.NewPedanticRegistry()
	o := NewObserver([]string{"tcp"}, prometheus.Labels{"engine": "a"})
	feedTask(o)
	c := NewCollector(&fakeSource{plugins: []Plugin{{Name: "tcp", State: "running", Counters: map[string]uint64{"descriptors": 1}}}}, time.Second, prometheus.Labels{"engine": "a"})
	defer c.Close()
	reg.MustRegister(o, c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = &buf
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

func feedTask(o *Observer) {
	for _, ev := range task("tcp", 1, 0, 10, 1, 0, 1, 2, 3, 4, 5) {
		o.Observe(ev)
	}
}

// requireBinary returns the path of a binary the test needs; without it
// the test is skipped, or fails under CI=true.
func requireBinary(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not found (apt-get install prometheus): %v", name, err)
		}
		t.Skipf("%s not found (apt-get install prometheus); skipped outside CI", name)
	}
	return p
}

func TestListenTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	_, err = Start(Config{Meter: NewMeter(nil, nil), Source: &fakeSource{}, Listen: addr})
	if !errors.Is(err, ErrListen) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("Start on a taken address: %v; want ErrListen naming %s", err, addr)
	}
}

// TestExporterServesAndUnregisters: the endpoint serves the series, and
// Close gives the application's registry back as it was.
func TestExporterServesAndUnregisters(t *testing.T) {
	reg := prometheus.NewRegistry()
	start := func() *Exporter {
		x, err := Start(Config{Meter: NewMeter([]string{"tcp"}, prometheus.Labels{"engine": "a"}), Source: &fakeSource{},
			Registerer: reg, Listen: "127.0.0.1:0", ConstLabels: prometheus.Labels{"engine": "a"}})
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	x := start()
	body := scrape(t, "http://"+x.Addr()+Path)
	if !strings.Contains(body, `ferry_metastore_up{engine="a"} 0`) {
		t.Fatalf("scrape lacks the collector's series:\n%s", body)
	}
	for _, want := range []string{`ferry_metastore_watch_up{engine="a",watch="segments"} 1`, `ferry_metastore_watch_up{engine="a",watch="own_descriptor"} 0`} {
		if !strings.Contains(body, want) {
			t.Fatalf("scrape lacks %s:\n%s", want, body)
		}
	}
	if _, err := Start(Config{Meter: NewMeter(nil, prometheus.Labels{"engine": "a"}), Source: &fakeSource{}, Registerer: reg,
		ConstLabels: prometheus.Labels{"engine": "a"}}); err == nil || !strings.Contains(err.Error(), "engine label") {
		t.Fatalf("a second engine of the same name in one registry: %v, want a registration error", err)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	x.Close()
	start().Close() // registers again: Close unregistered everything
}

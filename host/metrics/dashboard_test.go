package metrics

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DashboardFile is the Grafana dashboard on these series.
const dashboardFile = "../../docs/grafana/ferry.json"

// DashboardQueries returns every PromQL expression of the dashboard.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var qs []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			qs = append(qs, tg.Expr)
		}
	}
	return qs
}

// TestDashboardNamesExportedSeries: every series the dashboard queries
// is one this package exports (a renamed series breaks the test, not the
// operator's dashboard). host's Prometheus test runs each query.
func TestDashboardNamesExportedSeries(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	o := NewObserver([]string{"tcp"}, nil)
	feedTask(o)
	o.Observe(task("tcp", 1, 0, 1, 3, 0, 1, 2, 3, 4, 5)[6]) // canceled
	o.Observe(task("tcp", 1, 0, 1, 4, 0, 1, 2, 3, 4, 5)[6]) // timeout
	o.retried(eventRetried("tcp", "tcp", "io"))
	o.retried(eventRetried("tcp", "shm", "io"))
	c := NewCollector(&fakeSource{plugins: []Plugin{{Name: "tcp", State: "running", Counters: map[string]uint64{"x": 1}, ServedKnown: true}}}, time.Second, nil)
	defer c.Close()
	reg.MustRegister(o, c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
		if mf.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_count", "_sum"} {
				have[mf.GetName()+s] = true
			}
		}
	}
	name := regexp.MustCompile(`\bferry_[a-z_]+\b`)
	qs := dashboardQueries(t)
	if len(qs) < 10 {
		t.Fatalf("%s has %d queries; want a panel for each group of series", dashboardFile, len(qs))
	}
	used := map[string]bool{}
	for _, q := range qs {
		for _, n := range name.FindAllString(q, -1) {
			used[n] = true
			if !have[n] {
				t.Errorf("dashboard query %q names %s, which is not exported", q, n)
			}
		}
	}
	for _, must := range []string{"ferry_bytes_total", "ferry_requests_total", "ferry_stage_duration_seconds_bucket", "ferry_failovers_total",
		"ferry_retries_total", "ferry_plugin_restarts_total", "ferry_rail_bytes_total", "ferry_rail_errors_total", "ferry_rail_paused", "ferry_metastore_up",
		"ferry_rail_served_bytes_total"} {
		if !used[must] {
			t.Errorf("the dashboard does not show %s", must)
		}
	}
	if strings.Contains(strings.Join(qs, "\n"), "peer") {
		t.Error("a dashboard query names a peer label, which no series has")
	}
}

package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/observe"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// metricsClient keeps no idle connection, so that none outlives a test.
var metricsClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}

func httpGet(url string) (string, error) {
	resp, err := metricsClient.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b), err
}

// requireTool returns the path of a binary of Debian's prometheus
// package; without it the test is skipped, or fails under CI=true.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not found (apt-get install prometheus; .ci/run does): %v", name, err)
		}
		t.Skipf("%s not found (apt-get install prometheus); skipped outside CI", name)
	}
	return p
}

// prometheusServer is a Prometheus started by a test on loopback,
// scraping targets every second.
type prometheusServer struct{ url string }

func startPrometheus(t *testing.T, targets ...string) *prometheusServer {
	t.Helper()
	bin := requireTool(t, "prometheus")
	dir := t.TempDir()
	quoted := make([]string, len(targets))
	for i, a := range targets {
		quoted[i] = strconv.Quote(a)
	}
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: ferry\n    static_configs:\n      - targets: [%s]\n", strings.Join(quoted, ", "))
	file := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0") // a free port for its web API
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var logs bytes.Buffer
	cmd := exec.Command(bin, "--config.file="+file, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("prometheus output:\n%s", logs.String())
		}
	})
	p := &prometheusServer{url: "http://" + addr}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := httpGet(p.url + "/-/ready"); err == nil {
			return p
		}
		select {
		case <-exited:
			t.Fatalf("prometheus exited at start:\n%s", logs.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready within 30s:\n%s", logs.String())
		}
	}
}

// query returns the value of an instant PromQL query with one result;
// ok is false while it has none.
func (p *prometheusServer) query(t *testing.T, q string) (float64, bool) {
	t.Helper()
	body, err := httpGet(p.url + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		t.Fatalf("query %s: %v", q, err)
	}
	var r struct {
		Status string
		Data   struct {
			Result []struct {
				Value [2]any
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || r.Status != "success" {
		t.Fatalf("query %s: %v: %s", q, err, body)
	}
	if len(r.Data.Result) != 1 {
		return 0, false
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil
}

// await polls q until it has the value want (the scrapes catch up with
// the engine within a few scrape intervals), failing after 30s.
func (p *prometheusServer) await(t *testing.T, q string, want float64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, ok := p.query(t, q)
		if ok && v == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus: %s = %v (has a value: %v), want %v", q, v, ok, want)
		}
		time.Sleep(100 * time.Millisecond) // polling the API until the condition holds
	}
}

// metricsFaultConfig is failoverConfig (fault crashing mid-transfer,
// then tcp) with a metrics block on a free port.
func metricsFaultConfig(name string) string {
	return failoverConfig(name, true, false) + "metrics {\n  listen = \"127.0.0.1:0\"\n}\n"
}

// TestPrometheusScrapesEngine: a real Prometheus (Debian's package)
// scrapes a live engine every second while it moves a workload: one
// write large enough that the fault plugin crashes under it and it fails
// over to tcp, then small writes and reads through the restarted plugin.
// Through Prometheus's HTTP API, the bytes and request counters equal
// what the workload moved, the failover shows as {from="fault",
// to="tcp", cause="plugin_failed"}, the restart is counted, and every
// scrape succeeded, those during the crash and restart included (as did
// every one of a scraper hammering /metrics meanwhile). `promtool check
// metrics` passes on a scrape. The peer, which only receives, is scraped
// too: its served series hold the bytes written into it and read from it.
func TestPrometheusScrapesEngine(t *testing.T) {
	promtool := requireTool(t, "promtool")
	const big, small = 32 << 20, 64 << 10 // big: over crashAfter 1 MiB slices
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := hclEngine(t, ctx, metricsFaultConfig("pm-a"), "pm-a.hcl")
	target := a.MetricsAddr()
	if target == "" {
		t.Fatal("engine with a metrics block serves no metrics")
	}
	// The peer, with a metrics block of its own.
	file := filepath.Join(t.TempDir(), "pm-b.hcl")
	if err := os.WriteFile(file, []byte(withRunSecret(failoverConfig("pm-b", false, false)+"metrics {\n  listen = \"127.0.0.1:0\"\n}\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	b := startPeer(t, "--config", file, "--metastore", a.MetastoreURL(), "--expose", fmt.Sprint(big))
	seg, err := a.OpenSegment(ctx, "pm-b")
	if err != nil {
		t.Fatal(err)
	}
	if b.Ready.Metrics == "" {
		t.Fatalf("peer pm-b with a metrics block names no metrics address: %+v", b.Ready)
	}
	prom := startPrometheus(t, target, b.Ready.Metrics)
	prom.await(t, `count(up{job="ferry"} == 1)`, 2)
	remote := b.Ready.Buffers[0].Base
	local := randomLocal(t, ctx, a, big)

	// A scraper hammering /metrics meanwhile: no scrape may fail.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var scrapes int
	var scrapeErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := httpGet("http://" + target + "/metrics"); err != nil && scrapeErr == nil {
				scrapeErr = err
			}
			scrapes++
		}
	}()

	id, err := a.AllocateBatch(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Submit(id, host.Request{Op: host.Write, Local: local, Segment: seg.ID, Remote: remote}); err != nil {
		t.Fatal(err)
	}
	if err := a.Wait(ctx, id); err != nil {
		t.Fatalf("write through a crashing plugin: %v", err)
	}
	st, err := a.TaskStatus(id, 0)
	if err != nil || st.State != host.StateCompleted || st.Attempts < 2 {
		t.Fatalf("crash write: %+v, %v; want COMPLETED after a failover", st, err)
	}
	a.FreeBatch(id)
	b.holds(t, "the crash write", local)
	waitRunning(t, a, "fault")
	moved, requests := float64(big), 1.0
	for k := range 6 {
		op := host.Write
		if k >= 4 {
			op = host.Read
		}
		if err := a.Transfer(ctx, host.Request{Op: op, Local: local[k*small : (k+1)*small], Segment: seg.ID, Remote: remote + uint64(k*small)}); err != nil {
			t.Fatalf("transfer %d after the restart: %v", k, err)
		}
		moved += small
		requests++
	}
	close(stop)
	wg.Wait()
	if scrapeErr != nil || scrapes == 0 {
		t.Fatalf("%d scrapes during the workload; first failure: %v", scrapes, scrapeErr)
	}
	t.Logf("%d scrapes during the workload, none failed", scrapes)

	eng := `engine="pm-a"`
	prom.await(t, `sum(ferry_bytes_total{`+eng+`})`, moved)
	prom.await(t, `sum(ferry_requests_total{`+eng+`,state="completed"})`, requests)
	prom.await(t, `sum(ferry_requests_total{`+eng+`})`, requests)
	prom.await(t, `sum(ferry_bytes_total{`+eng+`,op="read"})`, 2*small)
	prom.await(t, `sum(ferry_retries_total{`+eng+`})`, float64(st.Attempts-1))
	prom.await(t, `sum(ferry_failovers_total{`+eng+`,from="fault",to="tcp",cause="plugin_failed"})`, 1)
	prom.await(t, `ferry_plugin_restarts_total{`+eng+`,plugin="fault"} >= bool 1`, 1)
	prom.await(t, `sum(ferry_stage_duration_seconds_count{`+eng+`,stage="end_to_end"})`, requests)
	prom.await(t, `ferry_metastore_up{`+eng+`}`, 1)
	prom.await(t, `ferry_segments{`+eng+`,state="live"}`, 1)
	prom.await(t, `min(min_over_time(up{job="ferry"}[10m]))`, 1) // every scrape succeeded
	// The receiver: what it served, by op. Reads are exact; writes at
	// least what completed (the crash write's lost slices landed too
	// before they were sent again).
	prom.await(t, `sum(ferry_rail_served_bytes_total{engine="pm-b",op="read"})`, 2*small)
	prom.await(t, `sum(ferry_rail_served_requests_total{engine="pm-b",op="read"}) >= bool 2`, 1)
	prom.await(t, fmt.Sprintf(`sum(ferry_rail_served_bytes_total{engine="pm-b",op="write"}) >= bool %d`, big+4*small), 1)
	prom.await(t, `sum(ferry_bytes_total{engine="pm-b"}) or vector(0)`, 0) // it asked for nothing itself

	// Every query of the Grafana dashboard parses and runs.
	for _, q := range dashboardQueries(t) {
		q = strings.NewReplacer("$engine", "pm-a", "$__rate_interval", "1m").Replace(q)
		prom.query(t, q) // fails the test on an error
	}

	body, err := httpGet("http://" + target + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// TestMetricsListenTaken: a metrics address that is taken fails New
// with an error that names the address and where the block set it.
func TestMetricsListenTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	src := fmt.Sprintf("name = \"mt-a\"\nplugin_dir = %q\nplugin \"tcp\" {\n  config {\n    listen = [\"127.0.0.1:0\"]\n  }\n}\nmetrics {\n  listen = %q\n}\n", binDir, addr)
	cfg, err := config.Parse([]byte(src), "mt.hcl")
	if err != nil {
		t.Fatal(err)
	}
	e, err := host.New(context.Background(), cfg)
	if err == nil {
		e.Close()
		t.Fatalf("New with metrics.listen %s taken: no error", addr)
	}
	for _, want := range []string{"mt.hcl:9:12", "metrics.listen", addr, "address already in use"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if !errors.Is(err, host.ErrInvalid) {
		t.Errorf("error %v is not ErrInvalid", err)
	}
}

// TestMetricsRegistry: embedded, the engine registers into the
// application's registry (no listener of its own); the series count what
// moved, the application's own observer still sees every event, and
// Close unregisters them.
func TestMetricsRegistry(t *testing.T) {
	const size, n = 64 << 10, 4
	ctx := context.Background()
	reg := prometheus.NewPedanticRegistry()
	obs := &countingObserver{}
	cfg := config.Default("mr-a")
	cfg.PluginDir = binDir
	e, err := host.New(ctx, cfg, host.WithMetricsRegistry(reg), host.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.MetricsAddr() != "" {
		t.Fatalf("an engine with a registry and no metrics block listens on %s", e.MetricsAddr())
	}
	src, _, seg, base := ownSegment(t, e, size)
	for range n {
		if err := e.Transfer(ctx, host.Request{Op: host.Write, Local: src, Segment: seg.ID, Remote: base, Transport: "shm"}); err != nil {
			t.Fatal(err)
		}
	}
	want := fmt.Sprintf(`
# HELP ferry_bytes_total Bytes of the requests that completed, by the transport that carried them; rate() of it is the throughput.
# TYPE ferry_bytes_total counter
ferry_bytes_total{engine="mr-a",op="write",priority="normal",transport="shm"} %d
`, n*size)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ferry_bytes_total"); err != nil {
		t.Fatal(err)
	}
	if c, err := testutil.GatherAndCount(reg, "ferry_plugin_up"); err != nil || c != 2 {
		t.Fatalf("ferry_plugin_up series: %d, %v; want one per plugin (tcp, shm)", c, err)
	}
	if got := obs.n[observe.Ended].Load(); got != n {
		t.Fatalf("the application's observer saw %d ends, want %d", got, n)
	}
	e.Close()
	if c, err := testutil.GatherAndCount(reg); err != nil || c != 0 {
		t.Fatalf("after Close the registry holds %d series (%v); want none", c, err)
	}
}

// dashboardQueries returns every PromQL expression of the Grafana
// dashboard, docs/grafana/ferry.json.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", "grafana", "ferry.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	var qs []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			qs = append(qs, tg.Expr)
		}
	}
	if len(qs) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	return qs
}

// TestEventsCarryRequestAndTimes: the observer's events carry the
// request's op and priority, and the stage times the metrics' latencies
// come from, in order.
func TestEventsCarryRequestAndTimes(t *testing.T) {
	const size = 64 << 10
	ctx := context.Background()
	rec := &eventLog{}
	cfg := config.Default("ev-a")
	cfg.PluginDir = binDir
	e, err := host.New(ctx, cfg, host.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	mem, err := e.Allocate(2 * size)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Register(ctx, mem[:size], host.LocalOnly); err != nil {
		t.Fatal(err)
	}
	base, err := e.Register(ctx, mem[size:], host.RemoteReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	seg, err := e.OpenSegment(ctx, e.Name())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Transfer(ctx, host.Request{Op: host.Read, Local: mem[:size], Segment: seg.ID, Remote: base, Transport: "shm", Priority: host.PriorityHigh}); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	at := map[observe.Stage]int64{}
	for _, ev := range rec.evs {
		if ev.Op != ring.OpRead || ev.Priority != sdk.PriorityHigh {
			t.Errorf("%v event: op %v, priority %v; want read, high", ev.Stage, ev.Op, ev.Priority)
		}
		at[ev.Stage] = ev.At
		var from observe.Stage
		switch ev.Stage {
		case observe.Admitted, observe.Ended:
			from = observe.Queued
		case observe.Submitted:
			from = observe.Admitted
		case observe.Completed:
			from = observe.Submitted
		case observe.Routed, observe.Sliced:
			if ev.At != 0 || ev.Since != 0 {
				t.Errorf("%v event timed (%d, %d): only the timed stages read the clock", ev.Stage, ev.At, ev.Since)
			}
			continue
		}
		if ev.At <= 0 {
			t.Errorf("%v event has no time", ev.Stage)
		}
		if from != 0 && (ev.Since != at[from] || ev.Since > ev.At) {
			t.Errorf("%v event: since %d, want %v's time %d, not after %d", ev.Stage, ev.Since, from, at[from], ev.At)
		}
	}
	if len(at) != 7 {
		t.Errorf("saw stages %v, want all seven of a task that completed first time", at)
	}
}

type eventLog struct {
	mu  sync.Mutex
	evs []observe.Event
}

func (l *eventLog) Observe(ev observe.Event) {
	l.mu.Lock()
	l.evs = append(l.evs, ev)
	l.mu.Unlock()
}

package main_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestReceiverShowsServedTraffic: a receiving engine (`ferry run`, the
// target of another engine's writes and reads, asking for nothing itself)
// shows what it served. While `ferry bench --target` (a second engine,
// its own plugin processes) writes into it over tcp, then over shm, a
// scrape of the receiver's /metrics sees ferry_rail_served_bytes_total
// grow; once each bench ends, the series hold at least the bytes the
// bench moved, per transport and op, and `ferry status` and `ferry top`
// list the sending engine with its bytes, and the rails' SERVED column
// carries them.
func TestReceiverShowsServedTraffic(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string { return writeTestFile(t, dir, name, body) }
	plugins := "plugin_dir = \"" + binDir + "\"\n" +
		"control {\n  listen = \"127.0.0.1:0\"\n}\n" +
		"plugin \"tcp\" {\n  config {\n    listen = [\"127.0.0.1:0\"]\n  }\n}\n" +
		"plugin \"shm\" {}\n"
	target := write("served-b.hcl", "name = \"served-b\"\n"+plugins+
		"metastore {\n  kind   = \"embedded\"\n  listen = \"127.0.0.1:"+freePort(t)+"\"\n}\n"+
		"metrics {\n  listen = \"127.0.0.1:0\"\n}\n")
	initiator := write("served-a.hcl", "name = \"served-a\"\n"+plugins) // bench runs it as bench-initiator-<pid>

	_, sc := startRun(t, "--config", target, "--expose", "16MiB")
	var ready struct {
		Metastore string `json:"metastore"`
		Control   string `json:"control"`
		Metrics   string `json:"metrics"`
	}
	readReady(t, sc, &ready)
	if ready.Metrics == "" || ready.Control == "" || ready.Metastore == "" {
		t.Fatalf("ready line %q: want the metrics, control and metastore addresses", sc.Text())
	}

	// served scrapes the receiver: ferry_rail_served_bytes_total summed by
	// transport and op.
	served := func() map[string]float64 {
		t.Helper()
		resp, err := http.Get("http://" + ready.Metrics + "/metrics")
		if err != nil {
			t.Fatalf("scrape the receiver: %v", err)
		}
		defer resp.Body.Close()
		p := expfmt.NewTextParser(model.UTF8Validation)
		mfs, err := p.TextToMetricFamilies(resp.Body)
		if err != nil {
			t.Fatalf("scrape the receiver: %v", err)
		}
		out := map[string]float64{}
		if mf := mfs["ferry_rail_served_bytes_total"]; mf != nil {
			for _, m := range mf.GetMetric() {
				var tr, op string
				for _, l := range m.GetLabel() {
					switch l.GetName() {
					case "transport":
						tr = l.GetValue()
					case "op":
						op = l.GetValue()
					}
				}
				out[tr+" "+op] += m.GetCounter().GetValue()
			}
		}
		return out
	}
	if s := served(); len(s) == 0 || s["tcp write"] != 0 {
		t.Fatalf("before any traffic the receiver exports served bytes %v; want tcp's series, at 0", s)
	}

	moved := map[string]uint64{}
	for _, tc := range []struct{ transport, op string }{{"tcp", "write"}, {"tcp", "read"}, {"shm", "write"}} {
		key := tc.transport + " " + tc.op
		before := served()[key]
		bench := exec.Command(filepath.Join(binDir, "ferry"), "bench", "--config", initiator, "--target", "served-b", "--metastore", ready.Metastore,
			"--transport", tc.transport, "--op", tc.op, "--size", "1MiB", "--batch", "4", "--duration", "1500ms", "--warmup", "10ms", "--no-baseline", "--json")
		var out bytes.Buffer
		bench.Stdout, bench.Stderr = &out, &out
		if err := bench.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- bench.Wait() }()
		// Scrape while the bench runs, until the receiver's served bytes
		// have grown: the series move with the traffic, not after it.
		grewDuring := false
		var berr error
	scrape:
		for {
			select {
			case berr = <-done:
				break scrape
			default:
			}
			if !grewDuring && served()[key] > before {
				grewDuring = true
			}
			select {
			case berr = <-done:
				break scrape
			case <-time.After(50 * time.Millisecond): // pacing the scrapes, not synchronising
			}
		}
		if berr != nil {
			t.Fatalf("bench %s %s: %v\n%s", tc.transport, tc.op, berr, out.String())
		}
		var row struct {
			Bytes    uint64 `json:"bytes"`
			Verified bool   `json:"verified"`
		}
		if err := json.Unmarshal(bytes.TrimSpace(lastLine(out.Bytes())), &row); err != nil || row.Bytes == 0 {
			t.Fatalf("bench %s %s printed %q: %v; want a row with bytes", tc.transport, tc.op, out.String(), err)
		}
		if !grewDuring {
			t.Errorf("%s: no scrape during the bench saw the receiver's served bytes grow", key)
		}
		// The bench's bytes are those of its measured window; warm-up
		// and the verification pass add to what the receiver served.
		if got := served()[key] - before; got < float64(row.Bytes) {
			t.Errorf("%s: the receiver served %.0f bytes by its metrics; the bench moved %d", key, got, row.Bytes)
		}
		moved[key] += row.Bytes
	}

	st := statusJSON(t, ready.Control)
	for _, tr := range []string{"tcp", "shm"} {
		var p *servedPlugin
		for i := range st.Plugins {
			if st.Plugins[i].Name == tr {
				p = &st.Plugins[i]
			}
		}
		if p == nil || !p.ServedKnown {
			t.Fatalf("ferry status --json: plugin %s does not count served traffic: %+v", tr, p)
		}
		byOp := map[string]uint64{}
		for _, v := range p.Served {
			if !strings.HasPrefix(v.Peer, "bench-initiator-") { // bench names its engine so
				t.Errorf("%s served peer %q; want a bench's engine, the only senders", tr, v.Peer)
			}
			if v.Requests == 0 {
				t.Errorf("%s served %+v: bytes without requests", tr, v)
			}
			byOp[v.Op] += v.Bytes
		}
		for _, op := range []string{"write", "read"} {
			if byOp[op] < moved[tr+" "+op] {
				t.Errorf("ferry status: %s served %d bytes of %s; the benches moved %d", tr, byOp[op], op, moved[tr+" "+op])
			}
		}
	}

	table := ferry(t, "status", "--engine", ready.Control)
	t.Logf("ferry status of the receiver:\n%s", table)
	for _, want := range []string{"SERVED", "served to peers", "PEER", "bench-initiator-"} {
		if !strings.Contains(table, want) {
			t.Errorf("ferry status lacks %q:\n%s", want, table)
		}
	}
	if strings.Contains(table, "served traffic not known") {
		t.Errorf("ferry status says a plugin does not count served traffic:\n%s", table)
	}
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) >= 8 && strings.HasPrefix(f[0], "bench-initiator-") && f[4] == "write" && f[6] == "0" {
			t.Errorf("ferry status lists writes from a bench with 0 bytes: %q", line)
		}
	}
	top := ferry(t, "top", "--engine", ready.Control, "--count", "2", "--interval", "100ms")
	if !strings.Contains(top, "bench-initiator-") || !strings.Contains(top, "NOW Gb/s") {
		t.Errorf("ferry top does not list the sender's served traffic:\n%s", top)
	}
}

type servedPlugin struct {
	Name        string `json:"name"`
	ServedKnown bool   `json:"served_known"`
	Served      []struct {
		Peer     string `json:"peer"`
		Rail     int    `json:"rail"`
		Op       string `json:"op"`
		Requests uint64 `json:"requests"`
		Bytes    uint64 `json:"bytes"`
	} `json:"served"`
}

// statusJSON is `ferry status --engine addr --json`, the parts read here.
func statusJSON(t *testing.T, addr string) (st struct {
	Plugins []servedPlugin `json:"plugins"`
}) {
	t.Helper()
	if err := json.Unmarshal([]byte(ferry(t, "status", "--engine", addr, "--json")), &st); err != nil {
		t.Fatalf("ferry status --json: %v", err)
	}
	return st
}

// lastLine returns b's last non-empty line.
func lastLine(b []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	return lines[len(lines)-1]
}

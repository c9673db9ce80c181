package main_test

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// qosTestScenario is short and small, so that the test runs on a busy
// machine, but has everything: a HIGH stream with a deadline, two LOW
// tenants weighted 3:1, one of them paced by a rate, and three rounds.
const qosTestScenario = `
duration = "200ms"
warmup   = "30ms"
rounds   = 3
tenant "a" { weight = 3 }
tenant "b" { weight = 1 }
stream "hi" {
  op       = "read"
  size     = "4KiB"
  priority = "high"
  intent   = "foreground_get"
  deadline = "10s"
}
stream "bulk-a" {
  op       = "write"
  size     = "1MiB"
  batch    = 2
  threads  = 2
  priority = "low"
  tenant   = "a"
}
stream "bulk-b" {
  op       = "read"
  size     = "1MiB"
  priority = "low"
  tenant   = "b"
  rate     = "50MiB"
}
`

type qosFiguresJSON struct {
	Tasks         int      `json:"tasks"`
	Bytes         uint64   `json:"bytes"`
	Gbps          float64  `json:"gbps"`
	P50us         float64  `json:"p50_us"`
	P99us         float64  `json:"p99_us"`
	P999us        float64  `json:"p999_us"`
	Deadlines     int      `json:"deadlines"`
	SLOAttainment *float64 `json:"slo_attainment"`
}

// TestBenchQoS runs a short scenario end to end over tcp and shm in one
// invocation (real engines, real plugins), and checks that every figure
// is there and sane and that the bytes verified.
func TestBenchQoS(t *testing.T) {
	path := filepath.Join(t.TempDir(), "qos.hcl")
	if err := os.WriteFile(path, []byte(qosTestScenario), 0o644); err != nil {
		t.Fatal(err)
	}
	jsonl := filepath.Join(t.TempDir(), "qos.jsonl")
	out := ferry(t, "bench", "--qos", path, "--json", "--jsonl", jsonl)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("bench --qos --json printed %d lines, want one per transport (tcp, shm):\n%s", len(lines), out)
	}
	if saved, err := os.ReadFile(jsonl); err != nil || strings.TrimSpace(string(saved)) != strings.TrimSpace(out) {
		t.Errorf("--jsonl holds %q (%v), want what --json printed", saved, err)
	}
	for i, line := range lines {
		var rep struct {
			Transport        string   `json:"transport"`
			Rounds           int      `json:"rounds"`
			Verified         bool     `json:"verified"`
			TenantOnRequests bool     `json:"tenant_on_requests"`
			ThroughputGbps   float64  `json:"throughput_gbps"`
			GoodputGbps      float64  `json:"goodput_gbps"`
			SLOAttainment    *float64 `json:"slo_attainment"`
			Jain             *float64 `json:"jain_fairness"`
			Classes          []struct {
				Class   string   `json:"class"`
				Streams []string `json:"streams"`
				qosFiguresJSON
			} `json:"classes"`
			Streams []struct {
				Name   string `json:"name"`
				Tenant string `json:"tenant"`
				qosFiguresJSON
			} `json:"streams"`
			Tenants []struct {
				Tenant      string  `json:"tenant"`
				Weight      float64 `json:"weight"`
				Bytes       uint64  `json:"bytes"`
				Share       float64 `json:"share"`
				WeightShare float64 `json:"weight_share"`
			} `json:"tenants"`
			Isolation *struct {
				Class         string    `json:"class"`
				AloneP99us    []float64 `json:"alone_p99_us"`
				MixedP99us    []float64 `json:"mixed_p99_us"`
				Leakage       []float64 `json:"leakage"`
				LeakageMedian float64   `json:"leakage_median"`
				LeakageMin    float64   `json:"leakage_min"`
				LeakageMax    float64   `json:"leakage_max"`
			} `json:"isolation"`
		}
		if err := json.Unmarshal([]byte(line), &rep); err != nil {
			t.Fatalf("line %d %q: %v", i, line, err)
		}
		tr := []string{"tcp", "shm"}[i]
		if rep.Transport != tr || rep.Rounds != 3 || !rep.Verified || !rep.TenantOnRequests {
			t.Errorf("%s: want transport %s, 3 rounds, verified, tenants on the requests: %s", tr, tr, line)
		}
		if rep.ThroughputGbps <= 0 || rep.GoodputGbps <= 0 || rep.GoodputGbps > rep.ThroughputGbps*(1+1e-9) {
			t.Errorf("%s: throughput %v, goodput %v GB/s: want 0 < goodput <= throughput", tr, rep.ThroughputGbps, rep.GoodputGbps)
		}
		if rep.SLOAttainment == nil || *rep.SLOAttainment < 0 || *rep.SLOAttainment > 1 {
			t.Errorf("%s: SLO attainment %v, want a share in [0, 1]", tr, rep.SLOAttainment)
		}
		if rep.Jain == nil || !(*rep.Jain > 0 && *rep.Jain <= 1) {
			t.Errorf("%s: Jain's index %v, want one in (0, 1]", tr, rep.Jain)
		}
		if len(rep.Classes) != 2 || rep.Classes[0].Class != "high" || rep.Classes[1].Class != "low" || len(rep.Classes[1].Streams) != 2 {
			t.Errorf("%s: classes %+v, want high (hi) and low (bulk-a, bulk-b)", tr, rep.Classes)
		}
		for _, c := range rep.Classes {
			f := c.qosFiguresJSON
			if f.Tasks <= 0 || f.Bytes == 0 || f.Gbps <= 0 || !(0 < f.P50us && f.P50us <= f.P99us && f.P99us <= f.P999us) {
				t.Errorf("%s class %s: %+v: want tasks, bytes and 0 < p50 <= p99 <= p999", tr, c.Class, f)
			}
		}
		if hi := rep.Classes[0]; hi.Deadlines != hi.Tasks || hi.SLOAttainment == nil {
			t.Errorf("%s: the HIGH class had %d deadlines over %d tasks and SLO %v: every request of it has one", tr, hi.Deadlines, hi.Tasks, hi.SLOAttainment)
		}
		if len(rep.Streams) != 3 || rep.Streams[0].Tenant != "default" || rep.Streams[2].Tenant != "b" {
			t.Errorf("%s: streams %+v", tr, rep.Streams)
		}
		for _, s := range rep.Streams {
			if s.Tasks <= 0 || s.Bytes == 0 {
				t.Errorf("%s: stream %s moved nothing: %+v", tr, s.Name, s.qosFiguresJSON)
			}
		}
		if len(rep.Tenants) != 3 || rep.Tenants[0].Tenant != "a" || rep.Tenants[0].WeightShare != 0.75 || rep.Tenants[1].Bytes == 0 ||
			rep.Tenants[0].Share+rep.Tenants[1].Share < 0.999 || rep.Tenants[2].Tenant != "default" {
			t.Errorf("%s: tenants %+v: want a (weight share 0.75), b, default, the declared ones' shares summing to 1", tr, rep.Tenants)
		}
		iso := rep.Isolation
		if iso == nil || iso.Class != "high" || len(iso.AloneP99us) != 3 || len(iso.MixedP99us) != 3 || len(iso.Leakage) != 3 {
			t.Fatalf("%s: isolation %+v: want the HIGH class over 3 rounds", tr, iso)
		}
		for r := range 3 {
			if iso.AloneP99us[r] <= 0 || iso.MixedP99us[r] <= 0 || iso.Leakage[r] <= 0 {
				t.Errorf("%s: isolation round %d: alone p99 %v, mixed p99 %v, leakage %v: want all above 0", tr, r, iso.AloneP99us[r], iso.MixedP99us[r], iso.Leakage[r])
			}
		}
		if !(iso.LeakageMin <= iso.LeakageMedian && iso.LeakageMedian <= iso.LeakageMax) {
			t.Errorf("%s: leakage median %v outside [%v, %v]", tr, iso.LeakageMedian, iso.LeakageMin, iso.LeakageMax)
		}
	}
}

// TestBenchQoSBadScenario: a scenario with a mistake fails before any
// engine starts, naming the file, line and column.
func TestBenchQoSBadScenario(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.hcl")
	if err := os.WriteFile(path, []byte("stream \"s\" {\n  op = \"read\"\n  size = \"4KiB\"\n  tenant = \"ghost\"\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(binDir, "ferry"), "bench", "--qos", path).CombinedOutput()
	if err == nil || !strings.Contains(string(out), path+`:4:3: stream "s": tenant "ghost" is not declared`) {
		t.Fatalf("bench --qos with an undeclared tenant: %v\n%s\nwant a failure naming %s:4:3", err, out, path)
	}
}

// TestBenchQoSStreamTransports: a stream that names its transports runs
// over those only, end to end: tcp's report has neither it nor its
// tenant; shm's has both, with the tenant's steady rate and its cap
// ratio (steady rate over the cap) and verified bytes.
func TestBenchQoSStreamTransports(t *testing.T) {
	const scenario = `
duration = "200ms"
warmup   = "0s"
rounds   = 1
tenant "a" { weight = 1 }
tenant "c" {
  weight = 1
  cap    = "100GB"
}
stream "both" {
  op   = "write"
  size = "1MiB"
  tenant = "a"
}
stream "shm-only" {
  op         = "write"
  size       = "1MiB"
  tenant     = "c"
  transports = ["shm"]
}
`
	path := filepath.Join(t.TempDir(), "qos.hcl")
	if err := os.WriteFile(path, []byte(scenario), 0o644); err != nil {
		t.Fatal(err)
	}
	out := ferry(t, "bench", "--qos", path, "--json")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("printed %d lines, want one per transport:\n%s", len(lines), out)
	}
	for i, line := range lines {
		var rep struct {
			Transport string `json:"transport"`
			Verified  bool   `json:"verified"`
			Streams   []struct {
				Name  string `json:"name"`
				Tasks int    `json:"tasks"`
			} `json:"streams"`
			Tenants []struct {
				Tenant     string  `json:"tenant"`
				Gbps       float64 `json:"gbps"`
				SteadyGbps float64 `json:"steady_gbps"`
				CapGbps    float64 `json:"cap_gbps"`
				CapRatio   float64 `json:"cap_ratio"`
			} `json:"tenants"`
		}
		if err := json.Unmarshal([]byte(line), &rep); err != nil {
			t.Fatalf("line %d %q: %v", i, line, err)
		}
		if !rep.Verified {
			t.Errorf("%s: not verified: %s", rep.Transport, line)
		}
		switch rep.Transport {
		case "tcp":
			if len(rep.Streams) != 1 || rep.Streams[0].Name != "both" || len(rep.Tenants) != 1 || rep.Tenants[0].Tenant != "a" {
				t.Errorf("tcp: streams %+v, tenants %+v: want only stream both and tenant a", rep.Streams, rep.Tenants)
			}
		case "shm":
			if len(rep.Streams) != 2 || rep.Streams[1].Name != "shm-only" || rep.Streams[1].Tasks == 0 || len(rep.Tenants) != 2 {
				t.Fatalf("shm: streams %+v, tenants %+v: want both streams, shm-only having moved something, and tenants a and c", rep.Streams, rep.Tenants)
			}
			c := rep.Tenants[1]
			if c.Tenant != "c" || c.CapGbps != 100 || !(c.SteadyGbps > 0) || math.Abs(c.CapRatio-c.SteadyGbps/c.CapGbps) > 1e-9 {
				t.Errorf("shm: tenant c %+v: want a cap of 100 GB/s and a cap ratio of its steady rate over it", c)
			}
		default:
			t.Errorf("a report for transport %q", rep.Transport)
		}
	}
}

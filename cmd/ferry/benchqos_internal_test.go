package main

import (
	"flag"
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/cmd/ferry/internal/qosstat"
	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/sdk"
)

// TestQoSDefaultScenarioIsTheExample: the built-in scenario of --qos
// default and bench/scenarios/mixed.hcl say the same thing.
func TestQoSDefaultScenarioIsTheExample(t *testing.T) {
	def, err := loadQoSScenario("default")
	if err != nil {
		t.Fatal(err)
	}
	file, err := loadQoSScenario("../../bench/scenarios/mixed.hcl")
	if err != nil {
		t.Fatal(err)
	}
	def.Name, file.Name = "", ""
	if !reflect.DeepEqual(def, file) {
		t.Fatalf("the built-in scenario and bench/scenarios/mixed.hcl differ:\n%+v\n%+v", def, file)
	}
	if len(def.Transports) != 2 || def.Rounds < 3 || len(def.highStreams()) != 1 || len(def.Tenants) != 2 {
		t.Fatalf("default scenario: want tcp and shm, >= 3 rounds, one HIGH stream and two tenants: %+v", def)
	}
}

// TestQoSScenarioExamples: every scenario in bench/scenarios parses.
func TestQoSScenarioExamples(t *testing.T) {
	files, err := filepath.Glob("../../bench/scenarios/*.hcl")
	if err != nil || len(files) < 3 {
		t.Fatalf("found %v (%v), want at least 3 scenarios", files, err)
	}
	for _, f := range files {
		if _, err := loadQoSScenario(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestQoSScenarioParse: every setting reaches the scenario, and what is
// left out takes its default.
func TestQoSScenarioParse(t *testing.T) {
	sc, err := parseQoSScenario([]byte(`
duration = "2s"
warmup = "0s"
rounds = 5
transports = ["shm"]
tenant "a" {
  weight = 2.5
  cap = "1GB"
}
stream "s" {
  op = "write"
  size = "1MiB"
  batch = 4
  threads = 3
  priority = "medium"
  tenant = "a"
  intent = "migration"
  deadline = "40ms"
  rate = "100MB"
}
stream "t" {
  op = "read"
  size = 4096
  transports = ["shm"]
}
`), "x.hcl")
	if err != nil {
		t.Fatal(err)
	}
	want := &qosScenario{Name: "x.hcl", Duration: 2 * time.Second, Warmup: 0, Rounds: 5, Transports: []string{"shm"},
		Tenants: []qosTenant{{Name: "a", Weight: 2.5, Cap: 1e9}},
		Streams: []qosStream{
			{Name: "s", Op: host.Write, Size: 1 << 20, Batch: 4, Threads: 3, Priority: sdk.PriorityNormal, Tenant: "a", Intent: "migration", Deadline: 40 * time.Millisecond, Rate: 100e6},
			{Name: "t", Op: host.Read, Size: 4096, Batch: 1, Threads: 1, Priority: sdk.PriorityNormal, Tenant: qosDefaultTenant, Transports: []string{"shm"}},
		}}
	if !reflect.DeepEqual(sc, want) {
		t.Fatalf("parsed\n%+v\nwant\n%+v", sc, want)
	}
	if requestTenant(sc.Streams[0]) != "a" || requestTenant(sc.Streams[1]) != "" {
		t.Fatal("the default tenant must reach requests as \"\", a declared one by its name")
	}
}

// TestQoSScenarioBadInput: each mistake is refused with the file, line
// and column of the setting and what to write instead.
func TestQoSScenarioBadInput(t *testing.T) {
	const ok = `stream "s" {
  op = "read"
  size = "4KiB"
`
	for _, tc := range []struct{ src, want string }{
		{ok + `  priority = "urgent"` + "\n}\n", `x.hcl:4:3: stream "s": priority "urgent": want high, medium`},
		{ok + `  tenant = "nobody"` + "\n}\n", `x.hcl:4:3: stream "s": tenant "nobody" is not declared`},
		{ok + `  deadline = "soon"` + "\n}\n", `x.hcl:4:3: stream "s": deadline "soon": want a duration`},
		{ok + `  deadline = "0s"` + "\n}\n", `x.hcl:4:3: stream "s": deadline "0s": want a duration above 0`},
		{ok + `  rate = "0"` + "\n}\n", `x.hcl:4:3: stream "s": rate "0": want more than 0 bytes per second`},
		{ok + `  intent = "fun"` + "\n}\n", `x.hcl:4:3: stream "s": intent: unknown intent "fun"`},
		{ok + `  batch = 0` + "\n}\n", `x.hcl:4:3: stream "s": batch 0: want 1 to 1024`},
		{ok + `  threads = -1` + "\n}\n", `x.hcl:4:3: stream "s": threads -1: want 1 to 1024`},
		{ok + `  colour = "red"` + "\n}\n", `x.hcl:4:3: Unsupported argument`},
		{ok + `  transports = ["rdma"]` + "\n}\n", `x.hcl:4:3: stream "s": transports ["rdma"]: "rdma" is not one of the scenario's transports ["tcp" "shm"]`},
		{ok + `  transports = ["shm", "shm"]` + "\n}\n", `x.hcl:4:3: stream "s": transports ["shm" "shm"]: "shm" is listed twice`},
		{ok + `  transports = []` + "\n}\n", `x.hcl:4:3: stream "s": transports is empty`},
		{"transports = [\"shm\"]\n" + ok + `  transports = ["tcp"]` + "\n}\n", `x.hcl:5:3: stream "s": transports ["tcp"]: "tcp" is not one of the scenario's transports ["shm"]`},
		{"stream \"s\" {\n  op = \"copy\"\n  size = \"4KiB\"\n}\n", `x.hcl:2:3: stream "s": op "copy": want read or write`},
		{"stream \"s\" {\n  op = \"read\"\n  size = \"0\"\n}\n", `x.hcl:3:3: stream "s": size "0": want more than 0 bytes`},
		{"stream \"s\" {\n  op = \"read\"\n  size = \"4K\"\n}\n", `x.hcl:3:3: stream "s": size:`},
		{"stream \"s\" {\n  op = \"read\"\n  size = \"5GiB\"\n  threads = 2\n}\n", `x.hcl:1:1: the streams need 10737418240 bytes`},
		{ok + "}\n" + ok + "}\n", `x.hcl:5:1: stream "s": each stream needs a name of its own`},
		{"tenant \"a\" {\n  weight = 0\n}\n" + ok + "}\n", `x.hcl:2:3: tenant "a": weight 0: want a number above 0`},
		{"tenant \"a\" {\n  weight = -3\n}\n" + ok + "}\n", `x.hcl:2:3: tenant "a": weight -3: want a number above 0`},
		{"tenant \"a\" { weight = 1 }\ntenant \"a\" { weight = 1 }\n" + ok + "}\n", `x.hcl:2:1: tenant "a" is declared twice`},
		{"tenant \"a\" {\n  weight = 1\n  cap = \"0\"\n}\n" + ok + "}\n", `x.hcl:3:3: tenant "a": cap "0": want more than 0 bytes per second`},
		{"tenant \"a\" {\n  weight = 1\n  cap = \"-1GB\"\n}\n" + ok + "}\n", `x.hcl:3:3: tenant "a": cap (bytes per second):`},
		{"tenant \"default\" { weight = 1 }\n" + ok + "}\n", `x.hcl:1:1: tenant "default": name it something other than`},
		{"rounds = 0\n" + ok + "}\n", `x.hcl:1:1: rounds 0: want 1 to 100`},
		{"duration = \"0s\"\n" + ok + "}\n", `x.hcl:1:1: duration "0s": want a duration above 0`},
		{"transports = []\n" + ok + "}\n", `x.hcl:1:1: transports is empty`},
		{"transports = [\"tcp\", \"tcp\"]\n" + ok + "}\n", `x.hcl:1:1: transports ["tcp" "tcp"]: each transport once`},
		{"duration = \"1s\"\n", `x.hcl:1:1: no stream block`},
		{"stream \"s\" {\n", `x.hcl:1:`},
	} {
		_, err := parseQoSScenario([]byte(tc.src), "x.hcl")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("scenario\n%s\ngave %v\nwant an error containing %q", tc.src, err, tc.want)
		}
	}
	if _, err := loadQoSScenario("/nonexistent/qos.hcl"); err == nil || !strings.Contains(err.Error(), "--qos") {
		t.Errorf("a missing scenario file gave %v, want an error naming --qos", err)
	}
}

// TestQoSReport: the report's figures from plain samples: classes group
// their streams, tenants get their shares and weighted Jain's index, and
// SLO attainment counts only the requests that had deadlines.
func TestQoSReport(t *testing.T) {
	sc := &qosScenario{Name: "s", Rounds: 3, Duration: time.Second, Transports: []string{"tcp"},
		Tenants: []qosTenant{{Name: "a", Weight: 3}, {Name: "b", Weight: 1}, {Name: "c", Weight: 1, Cap: 4e9}},
		Streams: []qosStream{
			{Name: "hi", Op: host.Read, Size: 4096, Batch: 1, Threads: 1, Priority: sdk.PriorityHigh, Tenant: qosDefaultTenant, Deadline: time.Millisecond},
			{Name: "ba", Op: host.Write, Size: 1 << 20, Batch: 1, Threads: 1, Priority: sdk.PriorityLow, Tenant: "a"},
			{Name: "bb", Op: host.Write, Size: 1 << 20, Batch: 1, Threads: 1, Priority: sdk.PriorityLow, Tenant: "b"},
			{Name: "bc", Op: host.Write, Size: 1 << 20, Batch: 1, Threads: 1, Priority: sdk.PriorityLow, Tenant: "c"},
		}}
	lat := func(n ...int) []time.Duration {
		out := make([]time.Duration, len(n))
		for i, x := range n {
			out[i] = time.Duration(x) * time.Microsecond
		}
		return out
	}
	mixed := []qosSample{
		{lat: lat(1, 2, 3, 4), bytes: 3 * 4096, goodBytes: 2 * 4096, tasks: 4, deadlines: 4, met: 2, seconds: 2},
		{lat: lat(100, 300), bytes: 3e9, goodBytes: 3e9, tasks: 2, seconds: 2},
		{lat: lat(200), bytes: 1e9, goodBytes: 1e9, tasks: 1, seconds: 2},
		{lat: lat(250), bytes: 3e9, goodBytes: 3e9, tasks: 1, seconds: 2},
	}
	q := &qosBench{o: qosOpts{sc: sc}}
	// c's steady rate (3e9 bytes over 1 s of its mixed phases' steady
	// parts) is what its cap is judged by, not its 1.5 GB/s over the
	// whole phases.
	steady := map[string]qosstat.Steady{"a": {Bytes: 3e9, Span: 2 * time.Second}, "c": {Bytes: 3e9, Span: time.Second}}
	rep := q.report("tcp", mixed, steady)
	if len(rep.Classes) != 2 || rep.Classes[0].Class != "high" || rep.Classes[1].Class != "low" ||
		!reflect.DeepEqual(rep.Classes[1].Streams, []string{"ba", "bb", "bc"}) {
		t.Fatalf("classes = %+v, want high (hi) then low (ba, bb, bc)", rep.Classes)
	}
	hi, lo := rep.Classes[0], rep.Classes[1]
	if hi.P50us != 2 || hi.P99us != 4 || hi.P999us != 4 || hi.SLOAttainment == nil || *hi.SLOAttainment != 0.5 {
		t.Errorf("high class = %+v, want p50 2us, p99 4us, SLO 0.5", hi.qosFigures)
	}
	if lo.Tasks != 4 || lo.P50us != 200 || lo.P99us != 300 || lo.Gbps != 3.5 || lo.SLOAttainment != nil {
		t.Errorf("low class = %+v, want 4 tasks, p50 200us, p99 300us, 3.5 GB/s, no SLO", lo.qosFigures)
	}
	if rep.SLOAttainment == nil || *rep.SLOAttainment != 0.5 {
		t.Errorf("SLO attainment %v, want 0.5 (2 of the 4 requests with a deadline)", rep.SLOAttainment)
	}
	if rep.GoodputGbps != (2*4096+7e9)/2/1e9 {
		t.Errorf("goodput %v GB/s", rep.GoodputGbps)
	}
	if len(rep.Tenants) != 4 || rep.Tenants[0].Share != 0.75 || rep.Tenants[0].WeightShare != 0.75 || rep.Tenants[0].FairRatio != 1 || rep.Tenants[3].Tenant != qosDefaultTenant {
		t.Errorf("tenants = %+v, want a at 0.75 of 0.75 (fair ratio 1), b, c, then the default tenant", rep.Tenants)
	}
	if c := rep.Tenants[2]; c.CapGbps != 4 || c.Gbps != 1.5 || c.SteadyGbps != 3 || c.CapRatio != 0.75 || c.Share != 0 || c.FairRatio != 0 || rep.Tenants[1].CapGbps != 0 {
		t.Errorf("tenant c = %+v, want cap 4 GB/s, 1.5 GB/s over the phases, 3 steady, at 0.75 of its cap, outside the shares; b without a cap", c)
	}
	if a, b := rep.Tenants[0], rep.Tenants[1]; a.SteadyGbps != 1.5 || b.SteadyGbps != 0 || a.CapRatio != 0 {
		t.Errorf("tenants a %+v, b %+v: want a steady 1.5 GB/s, b none measured, no cap ratio without a cap", a, b)
	}
	if rep.Jain == nil || *rep.Jain != 1 {
		t.Errorf("Jain %s, want 1: the uncapped tenants got 3:1 under weights 3:1", opt(rep.Jain))
	}
	mixed[1].bytes = 1e9
	if rep = q.report("tcp", mixed, steady); rep.Jain == nil || math.Abs(*rep.Jain-0.8) > 1e-12 {
		t.Errorf("Jain %s, want 0.8: 1:1 under weights 3:1", opt(rep.Jain))
	}
	// A stream that runs over shm only is not in tcp's report, nor is
	// its tenant; in shm's it is.
	sc.Transports = []string{"tcp", "shm"}
	sc.Streams[3].Transports = []string{"shm"}
	mixed[3] = qosSample{seconds: 2}
	rep = q.report("tcp", mixed, steady)
	if len(rep.Streams) != 3 || rep.Streams[2].Name != "bb" || len(rep.Tenants) != 3 || rep.Tenants[1].Tenant != "b" || rep.Tenants[2].Tenant != qosDefaultTenant ||
		!reflect.DeepEqual(rep.Classes[1].Streams, []string{"ba", "bb"}) {
		t.Errorf("tcp report with bc over shm only: streams %+v, tenants %+v, classes %+v: want bc and tenant c left out", rep.Streams, rep.Tenants, rep.Classes)
	}
	if rep = q.report("shm", mixed, steady); len(rep.Streams) != 4 || len(rep.Tenants) != 4 || rep.Tenants[2].Tenant != "c" {
		t.Errorf("shm report: streams %+v, tenants %+v: want all four streams and c", rep.Streams, rep.Tenants)
	}
	if got := sc.streamsOn("tcp"); !reflect.DeepEqual(got, []int{0, 1, 2}) {
		t.Errorf("streamsOn(tcp) = %v, want 0, 1, 2", got)
	}
}

// TestQoSSteadyOfTenants: a phase's completions are grouped by tenant,
// across the tenant's streams, and cut at the phase's end.
func TestQoSSteadyOfTenants(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	sc := &qosScenario{Tenants: []qosTenant{{Name: "a", Weight: 1}, {Name: "b", Weight: 1}},
		Streams: []qosStream{{Name: "a1", Tenant: "a"}, {Name: "a2", Tenant: "a"}, {Name: "b1", Tenant: "b"}, {Name: "d", Tenant: qosDefaultTenant}}}
	q := &qosBench{o: qosOpts{sc: sc}}
	got := []qosSample{
		{comps: []qosstat.Completion{{At: ms(10), Bytes: 100}, {At: ms(30), Bytes: 100}}},
		{comps: []qosstat.Completion{{At: ms(20), Bytes: 100}, {At: ms(1200), Bytes: 100}}}, // the second in the tail
		{comps: []qosstat.Completion{{At: ms(5), Bytes: 7}}},
		{comps: []qosstat.Completion{{At: ms(1), Bytes: 1}, {At: ms(2), Bytes: 1}}},
	}
	st := q.steadyOf(got, time.Second)
	if len(st) != 2 || st["a"] != (qosstat.Steady{Bytes: 200, Span: ms(20)}) || st["b"] != (qosstat.Steady{}) {
		t.Fatalf("steadyOf = %+v, want a: 200 bytes over 20ms (10, 20, 30 ms; the tail left out), b: none (one completion), no default", st)
	}
}

// TestQoSBenchRefusesStreamFlags: the flags that shape one stream do not
// mix with a scenario; the refusal names them, before any engine starts.
func TestQoSBenchRefusesStreamFlags(t *testing.T) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.String("qos", "", "")
	fs.String("size", "64MiB", "")
	fs.Bool("no-baseline", false, "")
	fs.Duration("duration", time.Second, "")
	if err := fs.Parse([]string{"--qos", "default", "--size", "4KiB", "--no-baseline"}); err != nil {
		t.Fatal(err)
	}
	err := cmdBenchQoS(fs, "default", "", false, "", logFlags{})
	if err == nil || !strings.Contains(err.Error(), "--no-baseline, --size") {
		t.Fatalf("--qos with --size and --no-baseline: %v, want a refusal naming both", err)
	}
	fs = flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.String("qos", "", "")
	fs.Duration("duration", time.Second, "")
	if err := fs.Parse([]string{"--qos", "default", "--duration", "0s"}); err != nil {
		t.Fatal(err)
	}
	if err := cmdBenchQoS(fs, "default", "", false, "", logFlags{}); err == nil || !strings.Contains(err.Error(), "--duration 0s: want more than 0") {
		t.Fatalf("--qos --duration 0s: %v, want a refusal", err)
	}
}

// TestQoSScenarioEngines: the engine configs shipped beside the caps and
// promotion scenarios load, and say what the scenarios assume: each
// capped tenant's rate in engines/caps.hcl is the cap the scenario
// reports against, and its streams run over one transport each; the two
// promotion configs differ in promotion alone.
func TestQoSScenarioEngines(t *testing.T) {
	sc, err := loadQoSScenario("../../bench/scenarios/caps.hcl")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load("../../bench/scenarios/engines/caps.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.QoS.On {
		t.Fatal("engines/caps.hcl: no qos block")
	}
	capped := 0
	for _, tn := range sc.Tenants {
		var rate int64 = -1
		for _, c := range cfg.QoS.Tenants {
			if c.Name == tn.Name {
				rate = c.Rate
			}
		}
		if rate != tn.Cap && !(tn.Cap == 0 && rate <= 0) {
			t.Errorf("tenant %q: the scenario reports against a cap of %d B/s, engines/caps.hcl sets rate %d", tn.Name, tn.Cap, rate)
		}
		if tn.Cap == 0 {
			continue
		}
		capped++
		for _, s := range sc.Streams {
			if s.Tenant == tn.Name && len(s.Transports) != 1 {
				t.Errorf("stream %q of capped tenant %q runs over %v, want one transport", s.Name, tn.Name, s.Transports)
			}
		}
	}
	if capped != len(sc.Transports) {
		t.Errorf("%d capped tenants, want one per transport (%v)", capped, sc.Transports)
	}

	if _, err := loadQoSScenario("../../bench/scenarios/promotion.hcl"); err != nil {
		t.Fatal(err)
	}
	off, err := config.Load("../../bench/scenarios/engines/promotion-off.hcl")
	if err != nil {
		t.Fatal(err)
	}
	on, err := config.Load("../../bench/scenarios/engines/promotion-on.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if !off.QoS.On || !on.QoS.On || off.QoS.Promotion != 0 || on.QoS.Promotion <= 0 {
		t.Fatalf("promotion configs: off %v (qos %v), on %v (qos %v): want qos blocks, off with promotion 0, on with more",
			off.QoS.Promotion, off.QoS.On, on.QoS.Promotion, on.QoS.On)
	}
	a, b := off.QoS, on.QoS
	a.Promotion = b.Promotion
	if !reflect.DeepEqual(a.QoSLimits, b.QoSLimits) || a.Promotion != b.Promotion || a.MaxQueued != b.MaxQueued || a.Lanes != b.Lanes ||
		len(a.Classes) != len(b.Classes) || len(a.Tenants) != len(b.Tenants) || a.RejectLate != b.RejectLate {
		t.Errorf("the promotion configs differ in more than promotion:\n%+v\n%+v", off.QoS, on.QoS)
	}
}

// TestTargetArgs: the target engine runs with the config targetConfig
// chose, on free control and metrics ports beside the initiator that
// holds the file's, and with the built-in config when there is none.
func TestTargetArgs(t *testing.T) {
	got := strings.Join(targetArgs("engine.hcl", "t", "http://m", 42), " ")
	if want := "--name t --metastore http://m --expose 42 --config engine.hcl --free-ports"; got != want {
		t.Errorf("with a config: %q, want %q", got, want)
	}
	got = strings.Join(targetArgs("", "t", "http://m", 42), " ")
	if want := "--name t --metastore http://m --expose 42"; got != want {
		t.Errorf("without one: %q, want %q", got, want)
	}
}

// TestTargetConfig: the target engine gets --config's file unless
// --target-config names another, or the built-in one.
func TestTargetConfig(t *testing.T) {
	for _, tc := range []struct{ cfg, target, want string }{
		{"", "", ""},
		{"a.hcl", "", "a.hcl"},
		{"a.hcl", "b.hcl", "b.hcl"},
		{"", "b.hcl", "b.hcl"},
		{"a.hcl", builtinConfig, ""},
	} {
		if got := targetConfig(tc.cfg, tc.target); got != tc.want {
			t.Errorf("--config %q --target-config %q: the target gets %q, want %q", tc.cfg, tc.target, got, tc.want)
		}
	}
}

// TestQoSEngineConfigs: every engine config in bench/scenarios/engines
// loads.
func TestQoSEngineConfigs(t *testing.T) {
	files, err := filepath.Glob("../../bench/scenarios/engines/*.hcl")
	if err != nil || len(files) < 4 {
		t.Fatalf("engine configs: %v, %v", files, err)
	}
	for _, f := range files {
		if _, err := config.Load(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

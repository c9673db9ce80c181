package fault

import (
	"strings"
	"testing"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/conf"
	"github.com/ferrydev/ferry/sdk/ring"
)

func TestParseConfig(t *testing.T) {
	src := "fault \"delay\" {\n  delay = \"5ms\"\n}\nfault \"drop\" {\n  after = 4\n  every = 2\n  rate = 0.5\n  seed = 9\n  status = \"peer_unreachable\"\n}\ntcp {\n  listen = [\"127.0.0.1:0\"]\n}\n"
	p, err := parseConfig(sdk.StartConfig{Config: []byte(src), ConfigFile: "f.hcl", ConfigLine: 10, ConfigColumn: 3, ConfigByte: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.faults) != 2 || p.faults[0].kind != Drop || p.faults[1].kind != Delay {
		t.Fatalf("faults %+v: want drop then delay", p.faults)
	}
	d := p.faults[0]
	if d.after != 4 || d.every != 2 || d.rate != 0.5 || d.seed != 9 || d.status != ring.StatusPeerUnreachable {
		t.Fatalf("drop %+v", d)
	}
	if got := strings.TrimSpace(string(p.tcpConfig.Config)); got != `listen = ["127.0.0.1:0"]` {
		t.Fatalf("tcp body %q", got)
	}
	// The tcp body starts after the brace on line 11 of the block, which
	// sits at line 10 of f.hcl.
	if p.tcpConfig.ConfigFile != "f.hcl" || p.tcpConfig.ConfigLine != 20 || p.tcpConfig.ConfigColumn != 6 {
		t.Fatalf("tcp body at %s:%d:%d, want f.hcl:20:6", p.tcpConfig.ConfigFile, p.tcpConfig.ConfigLine, p.tcpConfig.ConfigColumn)
	}
	if want := 100 + strings.Index(src, "tcp {") + len("tcp {"); p.tcpConfig.ConfigByte != want {
		t.Fatalf("tcp body at byte %d, want %d", p.tcpConfig.ConfigByte, want)
	}
}

func TestParseConfigEmpty(t *testing.T) {
	p, err := parseConfig(sdk.StartConfig{})
	if err != nil || len(p.faults) != 0 || p.tcpConfig.Config != nil {
		t.Fatalf("%+v, %v", p, err)
	}
	p, err = parseConfig(sdk.StartConfig{Config: []byte("fault \"stall\" {}\n")})
	if err != nil || len(p.faults) != 1 || p.tcpConfig.Config != nil {
		t.Fatalf("%+v, %v", p, err)
	}
}

func TestParseContractFaults(t *testing.T) {
	src := "fault \"overreport\" {\n  extra = 4096\n}\nfault \"duplicate\" {\n  after = 1\n}\nfault \"flip\" {\n  bit = 63\n}\nfault \"drop\" {}\n"
	p, err := parseConfig(sdk.StartConfig{Config: []byte(src), ConfigFile: "f.hcl", ConfigLine: 1, ConfigColumn: 1})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []Kind
	for _, f := range p.faults {
		kinds = append(kinds, f.kind)
	}
	if len(kinds) != 4 || kinds[0] != Drop || kinds[1] != Flip || kinds[2] != Duplicate || kinds[3] != Overreport {
		t.Fatalf("faults in order %v, want drop, flip, duplicate, overreport", kinds)
	}
	if p.faults[1].bit != 63 || p.faults[3].extra != 4096 || p.faults[2].after != 1 || p.faults[2].extra != 0 {
		t.Fatalf("faults %+v", p.faults)
	}
}

// A hold fault takes a delay, and abort = false makes Abort leave its
// descriptors alone.
func TestParseHold(t *testing.T) {
	for _, tc := range []struct {
		src     string
		noAbort bool
	}{
		{"fault \"hold\" {\n  delay = \"300ms\"\n}", false},
		{"fault \"hold\" {\n  delay = \"300ms\"\n  abort = false\n}", true},
	} {
		p, err := parseConfig(sdk.StartConfig{Config: []byte(tc.src), ConfigFile: "f.hcl", ConfigLine: 1, ConfigColumn: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.faults) != 1 || p.faults[0].kind != Hold || p.faults[0].delay.String() != "300ms" || p.faults[0].noAbort != tc.noAbort {
			t.Fatalf("%q: faults %+v", tc.src, p.faults)
		}
	}
}

func TestParseConfigErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{`fault "x" {}`, `f.hcl:1:1: fault config: unknown fault "x"`},
		{"fault \"drop\" {}\nfault \"drop\" {}", "declared twice"},
		{"fault \"drop\" {\n  every = 0\n}", "f.hcl:2:11: fault config: fault \"drop\": every"},
		{"fault \"drop\" {\n  after = -1\n}", "negative"},
		{"fault \"drop\" {\n  rate = 0\n}", "outside (0, 1]"},
		{"fault \"drop\" {\n  rate = 1.5\n}", "outside (0, 1]"},
		{"fault \"stall\" {\n  status = \"io\"\n}", "only to fault \"drop\""},
		{"fault \"drop\" {\n  delay = \"1s\"\n}", "only to fault \"delay\""},
		{"fault \"delay\" {\n  delay = \"soon\"\n}", "f.hcl:2:11: fault config: fault \"delay\": delay: \"soon\" is not a duration"},
		{"fault \"delay\" {\n  delay = \"1h\"\n}", "outside"},
		{"fault \"flip\" {}", "needs bit = N"},
		{"fault \"flip\" {\n  bit = 64\n}", "f.hcl:2:9: fault config: fault \"flip\": bit: 64 is outside 0..63"},
		{"fault \"drop\" {\n  bit = 1\n}", "only to fault \"flip\""},
		{"fault \"overreport\" {\n  extra = 0\n}", "outside 1.."},
		{"fault \"duplicate\" {\n  extra = 2\n}", "only to fault \"overreport\""},
		{"fault \"hold\" {}", "fault \"hold\": needs delay"},
		{"fault \"delay\" {\n  delay = \"1s\"\n  abort = false\n}", "only to fault \"hold\""},
		{"listen = []", "Unsupported argument"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			_, err := parseConfig(sdk.StartConfig{Config: []byte(tc.src), ConfigFile: "f.hcl", ConfigLine: 1, ConfigColumn: 1})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestChooses(t *testing.T) {
	f := fault{after: 3, every: 2, rate: 1}
	var got []uint64
	for i := range uint64(10) {
		if f.chooses(i, 0) {
			got = append(got, i)
		}
	}
	if want := []uint64{3, 5, 7, 9}; !equal(got, want) {
		t.Fatalf("chose %v, want %v", got, want)
	}
	// rate: deterministic for a seed, close to the rate, different seeds
	// choose differently.
	r1 := fault{every: 1, rate: 0.3, seed: 1}
	r2 := fault{every: 1, rate: 0.3, seed: 2}
	n, diff := 0, 0
	for i := range uint64(10000) {
		if r1.chooses(i, 0) != r1.chooses(i, 0) {
			t.Fatal("not deterministic")
		}
		if r1.chooses(i, 0) {
			n++
		}
		if r1.chooses(i, 0) != r2.chooses(i, 0) {
			diff++
		}
	}
	if n < 2700 || n > 3300 {
		t.Fatalf("rate 0.3 chose %d of 10000", n)
	}
	if diff == 0 {
		t.Fatal("seeds 1 and 2 chose the same descriptors")
	}
}

func equal(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestChoosesRail(t *testing.T) {
	f := fault{kind: Drop, every: 1, rate: 1, rail: 1}
	if f.chooses(0, 0) || !f.chooses(0, 1) || f.chooses(5, 2) {
		t.Errorf("a fault on rail 1 must choose rail 1's descriptors only")
	}
	f.rail = -1
	if !f.chooses(0, 0) || !f.chooses(0, 7) {
		t.Errorf("a fault without a rail must choose every rail's descriptors")
	}
}

// TestSettingsTable checks the tables that declare the config body.
func TestSettingsTable(t *testing.T) {
	for _, p := range append(conf.Lint("fault", Settings), conf.Lint("fault.fault", faultTable)...) {
		t.Error(p)
	}
}

package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/config"
)

func TestParseSupervise(t *testing.T) {
	tests := []struct {
		name string
		body string // the supervise block's body; "-" for no block
		want config.Supervise
		err  string // "" means valid
	}{
		{"no block", "-", config.Supervise{}, ""},
		{"empty block", "", config.Supervise{}, ""},
		{"all set", "stall_after = \"2s\"\n  probe_timeout = \"250ms\"\n  interval = \"100ms\"", config.Supervise{StallAfter: 2 * time.Second, ProbeTimeout: 250 * time.Millisecond, Interval: 100 * time.Millisecond}, ""},
		{"off", `stall_after = "0s"`, config.Supervise{Off: true}, ""},
		{"stall_after too short", `stall_after = "50ms"`, config.Supervise{}, `t.hcl:3:17: supervise.stall_after: 50ms is outside 100ms..1h0m0s; a typical value is "5s" ("0s" turns stall detection off)`},
		{"stall_after negative", `stall_after = "-1s"`, config.Supervise{}, "t.hcl:3:17: supervise.stall_after: -1s is outside"},
		{"probe_timeout zero", `probe_timeout = "0s"`, config.Supervise{}, `t.hcl:3:19: supervise.probe_timeout: 0s is outside 1ms..1m0s; a typical value is "1s"`},
		{"interval too long", `interval = "2m"`, config.Supervise{}, "t.hcl:3:14: supervise.interval: 2m0s is outside 10ms..1m0s"},
		{"not a duration", `stall_after = 5`, config.Supervise{}, "t.hcl:3:17: supervise.stall_after: want a duration string"},
		{"unknown attribute", `stall = "5s"`, config.Supervise{}, "t.hcl:3:3: Unsupported argument"},
		{"contract rule", "contract_violations = 3\n  contract_window = \"2s\"", config.Supervise{ContractViolations: 3, ContractWindow: 2 * time.Second}, ""},
		{"contract only counted", `contract_violations = 0`, config.Supervise{ContractOff: true}, ""},
		{"contract_violations negative", `contract_violations = -1`, config.Supervise{}, "t.hcl:3:25: supervise.contract_violations: -1 is outside 0..1048576"},
		{"contract_window too short", `contract_window = "1ms"`, config.Supervise{}, "t.hcl:3:21: supervise.contract_window: 1ms is outside 10ms..1h0m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := "name = \"a\"\n"
			if tt.body != "-" {
				src += "supervise {\n  " + tt.body + "\n}\n"
			}
			c, err := config.Parse([]byte(src), "t.hcl")
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Supervise != tt.want {
				t.Fatalf("Supervise = %+v, want %+v", c.Supervise, tt.want)
			}
		})
	}
	_, err := config.Parse([]byte("name = \"a\"\nsupervise {}\nsupervise {}\n"), "t.hcl")
	if err == nil || !strings.Contains(err.Error(), "t.hcl:3:1: supervise: a second supervise block; the first is at t.hcl:2:1") {
		t.Fatalf("two supervise blocks: %v", err)
	}
}

func TestSuperviseDefaults(t *testing.T) {
	got := config.Supervise{ProbeTimeout: 3 * time.Second}.WithDefaults()
	want := config.Supervise{StallAfter: config.DefaultStallAfter, ProbeTimeout: 3 * time.Second, Interval: config.DefaultSuperviseInterval,
		ContractViolations: config.DefaultContractViolations, ContractWindow: config.DefaultContractWindow, EndGrace: config.DefaultEndGrace, UpgradeDrain: config.DefaultUpgradeDrain}
	if got != want {
		t.Fatalf("WithDefaults = %+v, want %+v", got, want)
	}
	// contract_violations = 0 only counts: WithDefaults keeps it 0.
	if got := (config.Supervise{ContractOff: true}).WithDefaults(); got.ContractViolations != 0 {
		t.Fatalf("contract off: WithDefaults set contract_violations %d", got.ContractViolations)
	}
	c := config.Default("a")
	c.Supervise.StallAfter = time.Millisecond // in code: checked like a file's
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "supervise.stall_after: 1ms is outside") {
		t.Fatalf("Validate: %v", err)
	}
}

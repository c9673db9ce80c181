package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/config"
)

func TestCreditBlock(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       config.Credit // after WithDefaults
		on         bool
		err        string
	}{
		{name: "none", body: "", on: true, want: config.Credit{InitialBytes: config.DefaultCreditInitialBytes, MaxBytes: config.DefaultCreditMaxBytes,
			InitialRequests: config.DefaultCreditInitialRequests, MaxRequests: config.DefaultCreditMaxRequests,
			Interval: config.DefaultCreditInterval, TargetDelay: config.DefaultCreditTargetDelay}},
		{name: "set", body: "credit {\n  initial_bytes = \"1MiB\"\n  max_bytes = \"4MiB\"\n  initial_requests = 8\n  max_requests = 16\n  interval = \"10ms\"\n  target_delay = \"5ms\"\n}\n",
			on: true, want: config.Credit{InitialBytes: 1 << 20, MaxBytes: 4 << 20, InitialRequests: 8, MaxRequests: 16, Interval: 10 * time.Millisecond, TargetDelay: 5 * time.Millisecond}},
		{name: "off", body: "credit {\n  enabled = false\n}\n", on: false},
		{name: "initial above max", body: "credit {\n  initial_bytes = \"8MiB\"\n  max_bytes = \"4MiB\"\n}\n",
			err: "t.hcl:4:19: credit.initial_bytes: 8 MiB is above max_bytes (4 MiB)"},
		{name: "requests above max", body: "credit {\n  initial_requests = 20\n  max_requests = 10\n}\n",
			err: "t.hcl:4:22: credit.initial_requests: 20 is above max_requests (10)"},
		{name: "zero bytes", body: "credit {\n  max_bytes = 0\n}\n", err: "t.hcl:4:15: credit.max_bytes"},
		{name: "negative requests", body: "credit {\n  max_requests = -1\n}\n", err: "t.hcl:4:18: credit.max_requests"},
		{name: "zero interval", body: "credit {\n  interval = \"0s\"\n}\n", err: "t.hcl:4:14: credit.interval"},
		{name: "unknown setting", body: "credit {\n  max_grant = 1\n}\n", err: "t.hcl:4:3: Unsupported argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Parse([]byte("name = \"a\"\n\n"+tc.body), "t.hcl")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Credit.On() != tc.on {
				t.Errorf("On() = %v, want %v", c.Credit.On(), tc.on)
			}
			if !tc.on {
				return
			}
			got := c.Credit.WithDefaults()
			got.Enabled = nil
			if got != tc.want {
				t.Errorf("Credit = %+v, want %+v", got, tc.want)
			}
		})
	}
	// A Config built in code has credit on, with the defaults.
	if d := config.Default("a"); !d.Credit.On() || d.Credit.WithDefaults().MaxBytes != config.DefaultCreditMaxBytes {
		t.Errorf("Default: credit %+v, want on with the defaults", d.Credit)
	}
}

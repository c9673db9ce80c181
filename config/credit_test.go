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
		{name: "set", body: "qos {\n  credit {\n    initial_bytes = \"1MiB\"\n    max_bytes = \"4MiB\"\n    initial_requests = 8\n    max_requests = 16\n    interval = \"10ms\"\n    target_delay = \"5ms\"\n  }\n}\n",
			on: true, want: config.Credit{InitialBytes: 1 << 20, MaxBytes: 4 << 20, InitialRequests: 8, MaxRequests: 16, Interval: 10 * time.Millisecond, TargetDelay: 5 * time.Millisecond}},
		{name: "off", body: "qos {\n  credit {\n    enabled = false\n  }\n}\n", on: false},
		{name: "initial above max", body: "qos {\n  credit {\n    initial_bytes = \"8MiB\"\n    max_bytes = \"4MiB\"\n  }\n}\n",
			err: "t.hcl:5:21: qos.credit.initial_bytes: 8 MiB is above max_bytes (4 MiB)"},
		{name: "requests above max", body: "qos {\n  credit {\n    initial_requests = 20\n    max_requests = 10\n  }\n}\n",
			err: "t.hcl:5:24: qos.credit.initial_requests: 20 is above max_requests (10)"},
		{name: "zero bytes", body: "qos {\n  credit {\n    max_bytes = 0\n  }\n}\n", err: "t.hcl:5:17: qos.credit.max_bytes"},
		{name: "negative requests", body: "qos {\n  credit {\n    max_requests = -1\n  }\n}\n", err: "t.hcl:5:20: qos.credit.max_requests"},
		{name: "zero interval", body: "qos {\n  credit {\n    interval = \"0s\"\n  }\n}\n", err: "t.hcl:5:16: qos.credit.interval"},
		{name: "unknown setting", body: "qos {\n  credit {\n    max_grant = 1\n  }\n}\n", err: "t.hcl:5:5: Unsupported argument"},
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
			if c.QoS.Credit.On() != tc.on {
				t.Errorf("On() = %v, want %v", c.QoS.Credit.On(), tc.on)
			}
			if !tc.on {
				return
			}
			got := c.QoS.Credit.WithDefaults()
			got.Enabled = nil
			if got != tc.want {
				t.Errorf("Credit = %+v, want %+v", got, tc.want)
			}
		})
	}
	// A Config built in code has credit on, with the defaults.
	if d := config.Default("a"); !d.QoS.Credit.On() || d.QoS.Credit.WithDefaults().MaxBytes != config.DefaultCreditMaxBytes {
		t.Errorf("Default: credit %+v, want on with the defaults", d.QoS.Credit)
	}
}

// TestCreditOnlyLeavesAdmissionOff: a qos block that only tunes receiver
// credit does not turn admission on; anything else in it does.
func TestCreditOnlyLeavesAdmissionOff(t *testing.T) {
	for body, want := range map[string]bool{
		"": false,
		"qos {\n  credit {\n    max_requests = 128\n  }\n}\n": false,
		"qos {\n}\n": true,
		"qos {\n  promotion = \"1ms\"\n  credit {\n    max_requests = 128\n  }\n}\n": true,
	} {
		c, err := config.Parse([]byte("name = \"a\"\n\n"+body), "t.hcl")
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		if c.QoS.On != want {
			t.Errorf("%q: QoS.On = %v, want %v", body, c.QoS.On, want)
		}
	}
}

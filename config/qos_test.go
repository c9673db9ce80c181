package config_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/config"
)

// TestQoSExample decodes the worked example whole.
func TestQoSExample(t *testing.T) {
	c, err := config.Load(filepath.Join("examples", "qos.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	q := c.QoS
	if !q.On || q.DefaultTenant != "default" || q.Promotion != 2*time.Millisecond || !q.RejectLate ||
		q.MaxQueued != 4096 || q.Busy != config.QoSBlock || q.InflightBytes != 256<<20 || q.Lanes != config.QoSLanesPerClass || c.Transfer.Lanes != 3 {
		t.Errorf("qos = %+v", q)
	}
	if len(q.Classes) != 2 || q.Classes[0].Name != "low" || q.Classes[0].InflightBytes != 8<<20 || q.Classes[1].InflightRequests != 256 {
		t.Errorf("classes = %+v", q.Classes)
	}
	if len(q.Tenants) != 2 || q.Tenants[0].Name != "decode" || q.Tenants[0].Weight != 3 ||
		q.Tenants[1].Weight != 1 || q.Tenants[1].Rate != 2<<30 || q.Tenants[1].Burst != 16<<20 {
		t.Errorf("tenants = %+v", q.Tenants)
	}
}

// TestQoSOff: without a qos block admission is off, with its defaults
// preset for code that turns it on.
func TestQoSOff(t *testing.T) {
	c, err := config.Parse([]byte(`name = "a"`+"\n"), "a.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if c.QoS.On || c.QoS.Busy != config.QoSBlock || c.QoS.MaxQueued != config.DefaultMaxQueued {
		t.Errorf("qos = %+v", c.QoS)
	}
	c, err = config.Parse([]byte("name = \"a\"\nqos {}\n"), "a.hcl")
	if err != nil || !c.QoS.On || c.QoS.DefaultTenant != "default" {
		t.Errorf("empty qos block: %+v, %v", c.QoS, err)
	}
}

// TestQoSErrors: each bad qos setting is an error at its file:line:col,
// naming the setting and what to do.
func TestQoSErrors(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		line, col  int
		field, msg string
	}{
		{"zero cap", `tenant "a" { rate = 0 }`, 3, 23, "qos.tenant.a.rate", "0 is not a cap: want at least 1 (a cap of nothing holds every request back forever); leave it out for no bound"},
		{"negative class budget", `class "low" { inflight_bytes = -1 }`, 3, 34, "qos.class.low.inflight_bytes", "want a non-negative whole number of bytes"},
		{"zero requests", `inflight_requests = 0`, 3, 23, "qos.inflight_requests", "0 is not a cap"},
		{"unknown class", `class "urgent" {}`, 3, 9, "qos.class.urgent", `"urgent" is not a class: want "high", "medium" or "low"`},
		{"class twice", "class \"low\" {}\n  class \"low\" {}", 4, 3, "qos.class.low", `class "low" is declared twice; the first is at q.hcl:3:3`},
		{"tenant twice", "tenant \"a\" {}\n  tenant \"a\" {}", 4, 3, "qos.tenant.a", `tenant "a" is declared twice`},
		{"tenant above total", "inflight_bytes = \"1MiB\"\n  tenant \"a\" { inflight_bytes = \"2MiB\" }", 4, 33, "qos.tenant.a.inflight_bytes",
			"2097152 is above the total of 1048576 (qos.inflight_bytes at q.hcl:3:20): the tenant's budget can never be reached"},
		{"class above total", "rate = \"1GiB\"\n  class \"low\" { rate = \"2GiB\" }", 4, 24, "qos.class.low.rate", "is above the total"},
		{"zero weight", `tenant "a" { weight = 0 }`, 3, 25, "qos.tenant.a.weight", "is outside"},
		{"busy word", `busy = "drop"`, 3, 10, "qos.busy", `"drop": want "block" or "error"`},
		{"lanes per class on one lane", `lanes = "per_class"`, 3, 11, "qos.lanes", `"per_class" needs at least 2 lanes per plugin, and transfer.lanes is 1`},
		{"empty default tenant", `default_tenant = ""`, 3, 20, "qos.default_tenant", "is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "name = \"a\"\nqos {\n  " + tc.body + "\n}\n"
			_, err := config.Parse([]byte(src), "q.hcl")
			var ce *config.Error
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want a *config.Error", err)
			}
			if ce.File != "q.hcl" || ce.Line != tc.line || ce.Column != tc.col || ce.Field != tc.field {
				t.Errorf("error %v\n at %s:%d:%d field %q, want q.hcl:%d:%d field %q", ce, ce.File, ce.Line, ce.Column, ce.Field, tc.line, tc.col, tc.field)
			}
			if !strings.Contains(ce.Msg, tc.msg) {
				t.Errorf("message\n  %s\nwant it to contain\n  %s", ce.Msg, tc.msg)
			}
		})
	}
}

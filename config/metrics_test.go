package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/config"
)

func TestMetricsBlock(t *testing.T) {
	for _, tc := range []struct {
		name, src, listen string
		wait              time.Duration
		err               string
	}{
		{"none", "name = \"a\"\n", "", config.DefaultMetricsPluginTimeout, ""},
		{"set", "name = \"a\"\nmetrics {\n  listen = \"127.0.0.1:9464\"\n}\n", "127.0.0.1:9464", config.DefaultMetricsPluginTimeout, ""},
		{"timeout", "name = \"a\"\nmetrics {\n  listen = \"127.0.0.1:0\"\n  plugin_timeout = \"250ms\"\n}\n", "127.0.0.1:0", 250 * time.Millisecond, ""},
		{"no listen", "name = \"a\"\nmetrics {\n}\n", "", 0, `t.hcl:2:9: Missing required argument`},
		{"empty", "name = \"a\"\nmetrics {\n  listen = \"\"\n}\n", "", 0, `t.hcl:3:12: metrics.listen: "": not a host:port`},
		{"not host:port", "name = \"a\"\nmetrics {\n  listen = \"9464\"\n}\n", "", 0, `t.hcl:3:12: metrics.listen: "9464": not a host:port`},
		{"bad port", "name = \"a\"\nmetrics {\n  listen = \"h:70000\"\n}\n", "", 0, `t.hcl:3:12: metrics.listen: "h:70000": port "70000"`},
		{"timeout too long", "name = \"a\"\nmetrics {\n  listen = \"h:1\"\n  plugin_timeout = \"1m\"\n}\n", "", 0, `t.hcl:4:20: metrics.plugin_timeout`},
		{"twice", "name = \"a\"\nmetrics {\n  listen = \"h:1\"\n}\nmetrics {\n  listen = \"h:2\"\n}\n", "", 0, `t.hcl:5:1: metrics: a second metrics block; the first is at t.hcl:2:1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Parse([]byte(tc.src), "t.hcl")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Metrics.Listen != tc.listen || c.Metrics.PluginWait() != tc.wait {
				t.Errorf("Metrics = %+v (wait %v), want listen %q, wait %v", c.Metrics, c.Metrics.PluginWait(), tc.listen, tc.wait)
			}
		})
	}
}

// TestWhere: the position of a setting, for errors raised after Parse
// (a metrics address taken at start).
func TestWhere(t *testing.T) {
	c, err := config.Parse([]byte("name = \"a\"\n\nmetrics {\n  listen = \"127.0.0.1:9464\"\n}\n"), "e.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Where("metrics.listen"); got != "e.hcl:4:12" {
		t.Errorf("Where(metrics.listen) = %q, want e.hcl:4:12", got)
	}
	if got := c.Where("metrics"); got != "e.hcl:3:1" {
		t.Errorf("Where(metrics) = %q, want e.hcl:3:1", got)
	}
	if got := config.Default("a").Where("metrics.listen"); got != "" {
		t.Errorf("Where in a Config built in code = %q, want \"\"", got)
	}
}

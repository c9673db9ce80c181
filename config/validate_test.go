package config_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/config"
)

func TestDefaultIsValid(t *testing.T) {
	c := config.Default("engine-a")
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Name != "engine-a" || c.File != "" || c.MachineID == "" {
		t.Errorf("Default = %+v", c)
	}
	if !reflect.DeepEqual(c.Metastore, config.Metastore{Kind: "embedded", Listen: "127.0.0.1:0"}) {
		t.Errorf("Metastore = %+v", c.Metastore)
	}
	if len(c.Plugins) != 2 || c.Plugins[0].Name != "tcp" || !c.Plugins[0].Enabled || !strings.Contains(string(c.Plugins[0].Body), `"127.0.0.1:0"`) ||
		c.Plugins[1].Name != "shm" || !c.Plugins[1].Enabled {
		t.Errorf("Plugins = %+v", c.Plugins)
	}
	want := config.Transfer{SliceSize: 1 << 20, RingDepth: 4096, Spin: 20 * time.Microsecond, SpinSmall: time.Millisecond, StreamPause: 20 * time.Microsecond, CPUSlice: 100 * time.Microsecond, Lanes: 1, Attempts: 3,
		RetryBackoff: 50 * time.Millisecond, RetryBudget: 5 * time.Second, DefaultDeadline: 30 * time.Second}
	if c.Transfer != want {
		t.Errorf("Transfer = %+v, want %+v", c.Transfer, want)
	}
}

// TestValidateInCode checks configs built in code: no file to point at, so
// the errors name the field.
func TestValidateInCode(t *testing.T) {
	tests := []struct {
		name   string
		change func(*config.Config)
		want   string // "" means valid
	}{
		{"default", func(*config.Config) {}, ""},
		{"empty name", func(c *config.Config) { c.Name = "" }, "name: is required"},
		{"empty machine id is allowed", func(c *config.Config) { c.MachineID = "" }, ""},
		{"machine id with newline", func(c *config.Config) { c.MachineID = "a\nb" }, "machine_id: "},
		{"empty kind", func(c *config.Config) { c.Metastore = config.Metastore{} }, `metastore.kind: is empty; set "embedded" (serve descriptors from this engine), "http"`},
		{"none", func(c *config.Config) { c.Metastore = config.Metastore{Kind: "none"} }, ""},
		{"http", func(c *config.Config) {
			c.Metastore = config.Metastore{Kind: "http", URL: "https://meta.example/metadata"}
		}, ""},
		{"http without url", func(c *config.Config) { c.Metastore = config.Metastore{Kind: "http"} }, "metastore.url: is required"},
		{"http url with query", func(c *config.Config) {
			c.Metastore = config.Metastore{Kind: "http", URL: "http://h:1/metadata?key=x"}
		}, "metastore.url: \"http://h:1/metadata?key=x\": remove the query"},
		{"embedded without listen", func(c *config.Config) { c.Metastore.Listen = "" }, "metastore.listen: is empty"},
		{"listen on all interfaces", func(c *config.Config) { c.Metastore.Listen = ":7070" }, ""},
		{"ipv6 listen", func(c *config.Config) { c.Metastore.Listen = "[::1]:7070" }, ""},
		{"slice too big", func(c *config.Config) { c.Transfer.SliceSize = 2 << 30 }, "transfer.slice_size: 2147483648 bytes is outside"},
		{"ring depth 3", func(c *config.Config) { c.Transfer.RingDepth = 3 }, "transfer.ring_depth: 3 is not a power of two; use 2 or 4"},
		{"ring depth 0", func(c *config.Config) { c.Transfer.RingDepth = 0 }, "transfer.ring_depth: 0 is outside"},
		{"negative spin", func(c *config.Config) { c.Transfer.Spin = -time.Microsecond }, "transfer.spin: -1µs is outside"},
		{"too many lanes", func(c *config.Config) { c.Transfer.Lanes = 65 }, "transfer.lanes: 65 is outside 1..64"},
		{"plugin bad sha", func(c *config.Config) { c.Plugins[0].SHA256 = "xyz" }, "<default config>: plugin.tcp.sha256: want 64 hex digits"},
		{"plugin upper-case sha", func(c *config.Config) { c.Plugins[0].SHA256 = strings.Repeat("AB", 32) }, ""},
		{"plugin body syntax", func(c *config.Config) { c.Plugins[0].Body = []byte("listen = [\n") }, "<default config>:2:1: "},
		{"plugin without DeclRange", func(c *config.Config) {
			c.Plugins = append(c.Plugins, config.Plugin{Name: "tcp", Enabled: true})
		}, `plugin.tcp: plugin "tcp" is declared twice; the first is at <default config>`},
		{"plugin empty name", func(c *config.Config) { c.Plugins[0].Name = "" }, `plugin name "" must be`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := config.Default("engine-a")
			tt.change(c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestValidateAfterEdit checks that a config loaded from a file and then
// changed in code still points its errors at the file.
func TestValidateAfterEdit(t *testing.T) {
	c, err := config.Parse([]byte("name = \"a\"\n\ntransfer {\n  lanes = 2\n}\n"), "e.hcl")
	if err != nil {
		t.Fatal(err)
	}
	c.Transfer.Lanes = 100
	c.Transfer.RingDepth = 5
	err = c.Validate()
	for _, want := range []string{"e.hcl:4:11: transfer.lanes: 100", "e.hcl:3:1: transfer.ring_depth: 5"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to contain %q", err, want)
		}
	}
}

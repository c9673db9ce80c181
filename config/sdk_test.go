package config_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/sdk"
)

// startConfig hands a plugin block's body over as the host does.
func startConfig(p config.Plugin) sdk.StartConfig {
	return sdk.StartConfig{
		Engine:       "engine-a",
		Config:       p.Body,
		ConfigFile:   p.BodyFile,
		ConfigLine:   p.BodyLine,
		ConfigColumn: p.BodyColumn,
		ConfigByte:   p.BodyByte,
	}
}

// tcpSettings stands for a plugin's own schema.
type tcpSettings struct {
	Listen             []string `hcl:"listen,optional"`
	ConnectionsPerPeer int      `hcl:"connections_per_peer,optional"`
	Mode               string   `hcl:"mode,optional"`
}

func defaults() tcpSettings { return tcpSettings{ConnectionsPerPeer: 2, Mode: "auto"} }

// operatorFile puts the plugin's config block so that its line-14 setting
// is on line 14 of the operator's file.
func operatorFile(line14 string) string {
	return `# operator's engine file
name = "engine-a"

metastore {
  kind   = "embedded"
  listen = "127.0.0.1:0"
}

plugin "tcp" {
  enabled = true
  config {
    listen = ["127.0.0.1:0", "127.0.0.1:0"]

` + line14 + `
  }
}
`
}

func TestPluginBodyDecodesInSDK(t *testing.T) {
	tests := []struct {
		name    string
		line14  string
		want    tcpSettings
		wantErr []string
	}{
		{"valid", `    connections_per_peer = 4`,
			tcpSettings{Listen: []string{"127.0.0.1:0", "127.0.0.1:0"}, ConnectionsPerPeer: 4, Mode: "auto"}, nil},
		{"defaults stay", `    # nothing on line 14`,
			tcpSettings{Listen: []string{"127.0.0.1:0", "127.0.0.1:0"}, ConnectionsPerPeer: 2, Mode: "auto"}, nil},
		{"wrong type on line 14", `    connections_per_peer = "two"`, tcpSettings{},
			[]string{"/etc/ferry/engine-a.hcl:14:", "a number is required"}},
		{"unknown attribute on line 14", `    conections_per_peer = 4`, tcpSettings{},
			[]string{"/etc/ferry/engine-a.hcl:14:5: Unsupported argument", `Did you mean "connections_per_peer"?`}},
		{"two errors", `    connections_per_peer = "two"` + "\n    mode = [1]", tcpSettings{},
			[]string{"/etc/ferry/engine-a.hcl:14:", "/etc/ferry/engine-a.hcl:15:12: "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Parse([]byte(operatorFile(tt.line14)), "/etc/ferry/engine-a.hcl")
			if err != nil {
				t.Fatal(err) // the host does not decode the body: errors in it are not its business
			}
			got := defaults()
			err = sdk.DecodeConfig(startConfig(c.Plugins[0]), &got)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("no error; decoded %+v", got)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Listen, tt.want.Listen) || got.ConnectionsPerPeer != tt.want.ConnectionsPerPeer || got.Mode != tt.want.Mode {
				t.Errorf("decoded %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestDecodeConfigEdgeCases(t *testing.T) {
	type required struct {
		Device string `hcl:"device"`
	}
	single := "name = \"a\"\nplugin \"x\" {\n  config { mode = 7.5e }\n}\n"
	if _, err := config.Parse([]byte(single), "s.hcl"); err == nil || !strings.Contains(err.Error(), "s.hcl:3:") {
		t.Fatalf("syntax error in a config block is reported by Parse with its position: %v", err)
	}
	oneLine, err := config.Parse([]byte("name = \"a\"\nplugin \"x\" {\n  config { mode = [7] }\n}\n"), "s.hcl")
	if err != nil {
		t.Fatal(err)
	}
	emptyBlock, err := config.Parse([]byte("name = \"a\"\nplugin \"x\" {\n  config {}\n}\n"), "s.hcl")
	if err != nil {
		t.Fatal(err)
	}
	noBlock, err := config.Parse([]byte("name = \"a\"\nplugin \"x\" {}\n"), "s.hcl")
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		cfg     sdk.StartConfig
		target  func() any
		check   func(any) error
		wantErr string
	}{
		{"no config block leaves v unchanged", startConfig(noBlock.Plugins[0]),
			func() any { v := defaults(); return &v },
			func(v any) error { return equal(*v.(*tcpSettings), defaults()) }, ""},
		{"empty config block leaves v unchanged", startConfig(emptyBlock.Plugins[0]),
			func() any { v := defaults(); return &v },
			func(v any) error { return equal(*v.(*tcpSettings), defaults()) }, ""},
		{"single-line block, error column", startConfig(oneLine.Plugins[0]),
			func() any { v := defaults(); return &v }, nil, `s.hcl:3:19: `},
		{"required attribute missing", startConfig(noBlock.Plugins[0]),
			func() any { return &required{} }, nil, `The argument "device" is required`},
		{"zero position is line 1", sdk.StartConfig{Config: []byte("mode = [")},
			func() any { v := defaults(); return &v }, nil, "<plugin config>:1:"},
		{"default tcp body", startConfig(config.Default("a").Plugins[0]),
			func() any { v := defaults(); return &v },
			func(v any) error {
				w := defaults()
				w.Listen = []string{"127.0.0.1:0"}
				return equal(*v.(*tcpSettings), w)
			}, ""},
		{"not a pointer", startConfig(noBlock.Plugins[0]),
			func() any { return defaults() }, nil, "want a non-nil pointer to a struct, got config_test.tcpSettings"},
		{"nil pointer", startConfig(noBlock.Plugins[0]),
			func() any { return (*tcpSettings)(nil) }, nil, "want a non-nil pointer to a struct"},
		{"unusable tags", sdk.StartConfig{Config: []byte("a = 1\n")},
			func() any {
				return &struct {
					A chan int `hcl:"a"`
				}{}
			}, nil, "sdk.DecodeConfig: cannot decode into"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := tt.target()
			err := sdk.DecodeConfig(tt.cfg, v)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := tt.check(v); err != nil {
				t.Error(err)
			}
		})
	}
}

func equal(got, want tcpSettings) error {
	if !slices.Equal(got.Listen, want.Listen) || got.ConnectionsPerPeer != want.ConnectionsPerPeer || got.Mode != want.Mode {
		return fmt.Errorf("decoded %+v, want %+v", got, want)
	}
	return nil
}

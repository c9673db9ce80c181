package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/config"
)

const fullFile = `name       = "engine-a"
machine_id = "host-1"
plugin_dir = "bin"

metastore {
  kind   = "http"
  url    = "http://10.0.0.1:7070/metadata"
}

plugin "tcp" {
  path    = "tools/ferry-plugin-tcp"
  sha256  = "ABCDEF0123456789abcdef0123456789ABCDEF0123456789abcdef0123456789"
  enabled = false
  config {
    listen = ["127.0.0.1:0"]
    connections_per_peer = 2
  }
}

plugin "shm" {
  path = "/opt/ferry/ferry-plugin-shm"
}

transfer {
  slice_size = "1.5MiB"
  ring_depth = 1024
  spin       = "0s"
  lanes      = 2
}
`

func TestParseFull(t *testing.T) {
	file := filepath.Join("/etc/ferry", "engine.hcl")
	c, err := config.Parse([]byte(fullFile), file)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"Name", c.Name, "engine-a"},
		{"MachineID", c.MachineID, "host-1"},
		{"PluginDir", c.PluginDir, "/etc/ferry/bin"},
		{"File", c.File, file},
		{"Metastore", c.Metastore, config.Metastore{Kind: "http", URL: "http://10.0.0.1:7070/metadata"}},
		{"Transfer", c.Transfer, config.Transfer{SliceSize: 3 << 19, RingDepth: 1024, Spin: 0, SpinSmall: time.Millisecond, StreamPause: 20 * time.Microsecond, CPUSlice: 100 * time.Microsecond, Lanes: 2, Attempts: 3,
			RetryBackoff: 50 * time.Millisecond, RetryBudget: 5 * time.Second, DefaultDeadline: 30 * time.Second}},
		{"len(Plugins)", len(c.Plugins), 2},
		{"tcp.Name", c.Plugins[0].Name, "tcp"},
		{"tcp.Path", c.Plugins[0].Path, "/etc/ferry/tools/ferry-plugin-tcp"},
		{"tcp.SHA256", c.Plugins[0].SHA256, strings.ToLower("ABCDEF0123456789abcdef0123456789ABCDEF0123456789abcdef0123456789")},
		{"tcp.Enabled", c.Plugins[0].Enabled, false},
		{"tcp.Body", string(c.Plugins[0].Body), "\n    listen = [\"127.0.0.1:0\"]\n    connections_per_peer = 2\n  "},
		{"tcp.BodyFile", c.Plugins[0].BodyFile, file},
		{"tcp.BodyLine", c.Plugins[0].BodyLine, 14},
		{"tcp.BodyColumn", c.Plugins[0].BodyColumn, 11},
		{"tcp.BodyByte", c.Plugins[0].BodyByte, strings.Index(fullFile, "config {") + len("config {")},
		{"tcp.DeclRange", c.Plugins[0].DeclRange, file + ":10:1"},
		{"shm.Path", c.Plugins[1].Path, "/opt/ferry/ferry-plugin-shm"},
		{"shm.Enabled", c.Plugins[1].Enabled, true},
		{"shm.Body is nil", c.Plugins[1].Body == nil, true},
		{"shm.DeclRange", c.Plugins[1].DeclRange, file + ":20:1"},
	}
	for _, ch := range checks {
		if !reflect.DeepEqual(ch.got, ch.want) {
			t.Errorf("%s = %#v, want %#v", ch.name, ch.got, ch.want)
		}
	}
	p := c.Plugins[0]
	if got := fullFile[p.BodyByte : p.BodyByte+len(p.Body)]; got != string(p.Body) {
		t.Errorf("BodyByte does not point at Body in the source: %q", got)
	}
}

func TestParseDefaults(t *testing.T) {
	c, err := config.Parse([]byte(`name = "solo"`+"\n"), "solo.hcl")
	if err != nil {
		t.Fatal(err)
	}
	d := config.Default("solo")
	if !reflect.DeepEqual(c.Metastore, d.Metastore) {
		t.Errorf("Metastore = %+v, want %+v", c.Metastore, d.Metastore)
	}
	if c.Transfer != d.Transfer {
		t.Errorf("Transfer = %+v, want %+v", c.Transfer, d.Transfer)
	}
	if c.MachineID != config.DefaultMachineID() || c.MachineID == "" {
		t.Errorf("MachineID = %q, want DefaultMachineID() = %q", c.MachineID, config.DefaultMachineID())
	}
	if c.PluginDir != "" || len(c.Plugins) != 0 {
		t.Errorf("PluginDir = %q, Plugins = %v; want none", c.PluginDir, c.Plugins)
	}
	if c.Strict == nil || !*c.Strict || !c.IsStrict() {
		t.Errorf("Strict = %v, want true: the documented default", c.Strict)
	}
	want := config.Transfer{SliceSize: 1 << 20, RingDepth: 4096, Spin: 20 * time.Microsecond, SpinSmall: time.Millisecond, StreamPause: 20 * time.Microsecond, CPUSlice: 100 * time.Microsecond, Lanes: 1, Attempts: 3,
		RetryBackoff: 50 * time.Millisecond, RetryBudget: 5 * time.Second, DefaultDeadline: 30 * time.Second}
	if c.Transfer != want {
		t.Errorf("Transfer = %+v, want %+v", c.Transfer, want)
	}
}

func TestParseBlockForms(t *testing.T) {
	tests := []struct {
		name     string
		src      string
		wantBody string
		wantNil  bool
	}{
		{"single-line block", "name = \"a\"\nplugin \"tcp\" {\n  config { listen = [\"x:1\"] }\n}\n", ` listen = ["x:1"] `, false},
		{"empty block", "name = \"a\"\nplugin \"tcp\" {\n  config {}\n}\n", "", false},
		{"no config block", "name = \"a\"\nplugin \"tcp\" {}\n", "", true},
		{"comments kept", "name = \"a\"\nplugin \"tcp\" {\n  config {\n    # why\n    a = 1 // two\n  }\n}\n", "\n    # why\n    a = 1 // two\n  ", false},
		{"nested blocks kept", "name = \"a\"\nplugin \"x\" {\n  config {\n    rail \"r0\" {\n      nic = \"mlx5_0\"\n    }\n  }\n}\n", "\n    rail \"r0\" {\n      nic = \"mlx5_0\"\n    }\n  ", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Parse([]byte(tt.src), "b.hcl")
			if err != nil {
				t.Fatal(err)
			}
			p := c.Plugins[0]
			if tt.wantNil {
				if p.Body != nil {
					t.Fatalf("Body = %q, want nil", p.Body)
				}
				return
			}
			if p.Body == nil || string(p.Body) != tt.wantBody {
				t.Fatalf("Body = %q (nil %v), want %q", p.Body, p.Body == nil, tt.wantBody)
			}
			if got := tt.src[p.BodyByte : p.BodyByte+len(p.Body)]; got != tt.wantBody {
				t.Errorf("BodyByte points at %q", got)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	const sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	tests := []struct {
		name string
		src  string
		want []string // substrings, every one must appear
	}{
		{"syntax", "name = \n", []string{"t.hcl:1:8: Invalid expression"}},
		{"unknown attribute", "machine_id = \"m\"\nnmae = \"b\"\n", []string{"t.hcl:2:1: Unsupported argument", `Did you mean "name"?`}},
		{"ttl misspelt", "name = \"a\"\nmetastore {\n  kind = \"redis\"\n  address = \"127.0.0.1:6379\"\n  tll = \"30s\"\n}\n", []string{"t.hcl:5:3: Unsupported argument", `Did you mean "ttl"?`}},
		{"unknown block", "name = \"a\"\nrails {}\n", []string{"t.hcl:2:1: Unsupported block type", `"rails"`}},
		{"unknown plugin attribute", "name = \"a\"\nplugin \"tcp\" {\n  sha265 = \"x\"\n}\n", []string{"t.hcl:3:3: Unsupported argument", `Did you mean "sha256"?`}},
		{"plugin without label", "name = \"a\"\nplugin {\n}\n", []string{"t.hcl:2:8: ", "Missing name for plugin"}},
		{"config with label", "name = \"a\"\nplugin \"tcp\" {\n  config \"x\" {}\n}\n", []string{"t.hcl:3:10: ", "Extraneous label for config"}},
		{"missing name", "transfer {}\n", []string{"t.hcl:1:1: name: is required", `name = "engine-a"`}},
		{"name wrong type", "name = [\"a\"]\n", []string{"t.hcl:1:8: name: want a string, got tuple"}},
		{"name with space", "name = \"a b\"\n", []string{"t.hcl:1:8: name: ", "without spaces"}},
		{"variables", "name = var.x\n", []string{"t.hcl:1:8: Variables not allowed"}},
		{"functions", "name = upper(\"x\")\n", []string{"t.hcl:1:8: Function calls not allowed"}},
		{"ring depth not a power of two", "name = \"a\"\ntransfer {\n  ring_depth = 1000\n}\n", []string{"t.hcl:3:16: transfer.ring_depth: 1000 is not a power of two; use 512 or 1024"}},
		{"ring depth fraction", "name = \"a\"\ntransfer {\n  ring_depth = 1.5\n}\n", []string{"t.hcl:3:16: transfer.ring_depth: want a whole number like 4096, got the number 1.5"}},
		{"ring depth string", "name = \"a\"\ntransfer {\n  ring_depth = \"many\"\n}\n", []string{"t.hcl:3:16: transfer.ring_depth: want a whole number", `"many"`}},
		{"ring depth too big", "name = \"a\"\ntransfer {\n  ring_depth = 4194304\n}\n", []string{"t.hcl:3:16: transfer.ring_depth: 4194304 is outside 2..1048576"}},
		{"size unit", "name = \"a\"\ntransfer {\n  slice_size = \"1XB\"\n}\n", []string{"t.hcl:3:16: transfer.slice_size: ", `unknown unit "XB"`}},
		{"size fraction of a byte", "name = \"a\"\ntransfer {\n  slice_size = \"0.1KiB\"\n}\n", []string{"t.hcl:3:16: transfer.slice_size: ", "not a whole number of bytes"}},
		{"size too small", "name = \"a\"\ntransfer {\n  slice_size = 100\n}\n", []string{"t.hcl:3:16: transfer.slice_size: 100 bytes is outside 4KiB..1GiB"}},
		{"size negative", "name = \"a\"\ntransfer {\n  slice_size = -4096\n}\n", []string{"t.hcl:3:16: transfer.slice_size: want a non-negative whole number"}},
		{"size bool", "name = \"a\"\ntransfer {\n  slice_size = true\n}\n", []string{"t.hcl:3:16: transfer.slice_size: want a size"}},
		{"spin not a duration", "name = \"a\"\ntransfer {\n  spin = \"fast\"\n}\n", []string{"t.hcl:3:10: transfer.spin: \"fast\" is not a duration"}},
		{"spin a number", "name = \"a\"\ntransfer {\n  spin = 20\n}\n", []string{"t.hcl:3:10: transfer.spin: want a duration string"}},
		{"spin too long", "name = \"a\"\ntransfer {\n  spin = \"1s\"\n}\n", []string{"t.hcl:3:10: transfer.spin: 1s is outside 0s..10ms"}},
		{"lanes zero", "name = \"a\"\ntransfer {\n  lanes = 0\n}\n", []string{"t.hcl:3:11: transfer.lanes: 0 is outside 1..64"}},
		{"duplicate transfer", "name = \"a\"\ntransfer {}\ntransfer {}\n", []string{"t.hcl:3:1: transfer: a second transfer block; the first is at t.hcl:2:1"}},
		{"duplicate metastore", "name = \"a\"\nmetastore {}\nmetastore {}\n", []string{"t.hcl:3:1: metastore: a second metastore block; the first is at t.hcl:2:1"}},
		{"metastore kind", "name = \"a\"\nmetastore {\n  kind = \"zookeeper\"\n}\n", []string{`t.hcl:3:10: metastore.kind: "zookeeper" is not supported; use "embedded"`}},
		{"http without url", "name = \"a\"\nmetastore {\n  kind = \"http\"\n}\n", []string{"t.hcl:2:1: metastore.url: is required with kind = \"http\""}},
		{"http bad url", "name = \"a\"\nmetastore {\n  kind = \"http\"\n  url = \"localhost:7070\"\n}\n", []string{`t.hcl:4:9: metastore.url: "localhost:7070": the scheme must be http or https`}},
		{"http with listen", "name = \"a\"\nmetastore {\n  kind = \"http\"\n  url = \"http://h:1/metadata\"\n  listen = \"127.0.0.1:1\"\n}\n", []string{`t.hcl:5:12: metastore.listen: is only used with kind = "embedded"`}},
		{"embedded with url", "name = \"a\"\nmetastore {\n  url = \"http://h:1/metadata\"\n}\n", []string{`t.hcl:3:9: metastore.url: is only used with kind = "http"`}},
		{"embedded bad listen", "name = \"a\"\nmetastore {\n  listen = \"7070\"\n}\n", []string{`t.hcl:3:12: metastore.listen: "7070": not a host:port`}},
		{"embedded bad port", "name = \"a\"\nmetastore {\n  listen = \"127.0.0.1:99999\"\n}\n", []string{`t.hcl:3:12: metastore.listen: "127.0.0.1:99999": port "99999" is not a number in 0..65535`}},
		{"none with url", "name = \"a\"\nmetastore {\n  kind = \"none\"\n  url = \"http://h:1/m\"\n}\n", []string{`t.hcl:3:10: metastore.kind: is "none", which needs neither`}},
		{"duplicate plugin", "name = \"a\"\nplugin \"tcp\" {}\nplugin \"shm\" {}\nplugin \"tcp\" {}\n", []string{`t.hcl:4:1: plugin.tcp: plugin "tcp" is declared twice; the first is at t.hcl:2:1`}},
		{"plugin name", "name = \"a\"\nplugin \"TCP\" {}\n", []string{`t.hcl:2:8: plugin.TCP: plugin name "TCP" must be`}},
		{"plugin name with slash", "name = \"a\"\nplugin \"../x\" {}\n", []string{`t.hcl:2:8: plugin.../x: plugin name "../x" must be`}},
		{"bad sha256", "name = \"a\"\nplugin \"tcp\" {\n  sha256 = \"abc\"\n}\n", []string{"t.hcl:3:12: plugin.tcp.sha256: want 64 hex digits", "sha256sum ferry-plugin-tcp", "got 3 characters"}},
		{"sha256 not hex", "name = \"a\"\nplugin \"tcp\" {\n  sha256 = \"" + strings.Repeat("z", 64) + "\"\n}\n", []string{"t.hcl:3:12: plugin.tcp.sha256: want 64 hex digits"}},
		{"enabled not bool", "name = \"a\"\nplugin \"tcp\" {\n  enabled = \"maybe\"\n}\n", []string{`t.hcl:3:13: plugin.tcp.enabled: want true or false, got the string "maybe"`}},
		{"two config blocks", "name = \"a\"\nplugin \"tcp\" {\n  config {}\n  config {}\n}\n", []string{"t.hcl:4:3: plugin.tcp.config: a second config block; the first is at t.hcl:3:3"}},
		{"several problems at once", "name = \"a\"\ntransfer {\n  ring_depth = 1000\n  lanes = 0\n}\nplugin \"tcp\" {\n  sha256 = \"" + sha[:10] + "\"\n}\n", []string{
			"t.hcl:3:16: transfer.ring_depth:", "t.hcl:4:11: transfer.lanes:", "t.hcl:7:12: plugin.tcp.sha256:"}},
		{"several decode problems at once", "name = 1\nmachine_id = [1]\ntransfer {\n  spin = 1\n  lanes = \"x\"\n}\n", []string{
			"t.hcl:2:14: machine_id: want a string", "t.hcl:4:10: transfer.spin:", "t.hcl:5:11: transfer.lanes:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Parse([]byte(tt.src), "t.hcl")
			if err == nil {
				t.Fatalf("no error; config %+v", c)
			}
			if c != nil {
				t.Errorf("Parse returned a config with an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n  %s\nwant it to contain\n  %s", strings.ReplaceAll(err.Error(), "\n", "\n  "), w)
				}
			}
			// Every line of the message is located.
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "t.hcl:") {
					t.Errorf("unlocated error line %q", line)
				}
			}
		})
	}
}

func TestErrorsAreTyped(t *testing.T) {
	_, err := config.Parse([]byte("name = \"a\"\ntransfer {\n  lanes = 0\n}\n"), "t.hcl")
	var ce *config.Error
	if !errors.As(err, &ce) {
		t.Fatalf("errors.As(%v, *config.Error) = false", err)
	}
	want := config.Error{File: "t.hcl", Line: 3, Column: 11, Field: "transfer.lanes"}
	if ce.File != want.File || ce.Line != want.Line || ce.Column != want.Column || ce.Field != want.Field {
		t.Errorf("error = %+v, want location %+v", *ce, want)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "engine.hcl")
	src := "name = \"a\"\nplugin_dir = \"plugins\"\nplugin \"tcp\" {\n  path = \"../elsewhere/tcp\"\n}\n"
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.File != path {
		t.Errorf("File = %q, want %q", c.File, path)
	}
	if want := filepath.Join(dir, "plugins"); c.PluginDir != want {
		t.Errorf("PluginDir = %q, want %q", c.PluginDir, want)
	}
	if want := filepath.Join(filepath.Dir(dir), "elsewhere", "tcp"); c.Plugins[0].Path != want {
		t.Errorf("plugin path = %q, want %q", c.Plugins[0].Path, want)
	}

	missing := filepath.Join(dir, "missing.hcl")
	if _, err := config.Load(missing); err == nil || !strings.Contains(err.Error(), missing) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load of a missing file: err = %v", err)
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr string
	}{
		{"0", 0, ""},
		{"4096", 4096, ""},
		{"4096B", 4096, ""},
		{"4KiB", 4 << 10, ""},
		{"4 KiB", 4 << 10, ""},
		{" 64MiB ", 64 << 20, ""},
		{"64mib", 64 << 20, ""},
		{"1GiB", 1 << 30, ""},
		{"2TiB", 2 << 40, ""},
		{"1.5MiB", 3 << 19, ""},
		{"0.5KiB", 512, ""},
		{"4KB", 4000, ""},
		{"4kb", 4000, ""},
		{"1MB", 1000000, ""},
		{"1GB", 1000000000, ""},
		{"1TB", 1000000000000, ""},
		{"1.5", 0, "not a whole number of bytes"},
		{"0.1KiB", 0, "not a whole number of bytes"},
		{"", 0, "empty size"},
		{"   ", 0, "empty size"},
		{"KiB", 0, "invalid size"},
		{"-1", 0, "invalid size"},
		{"1..5KiB", 0, "invalid size"},
		{".", 0, "invalid size"},
		{"4K", 0, `unknown unit "K"`},
		{"4 apples", 0, `unknown unit "apples"`},
		{"1e3", 0, `unknown unit "e3"`},
		{"0x10", 0, `unknown unit "x10"`},
		{"9223372036854775807", 1<<63 - 1, ""},
		{"9223372036854775808", 0, "larger than"},
		{"8589934592GiB", 0, "larger than"},
		{strings.Repeat("9", 41), 0, "too long"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := config.ParseSize(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseSize(%q) = %d, %v; want error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
		})
	}
}

// TestStrictDefault: strict is true unless something says false, wherever
// the configuration comes from: a file that leaves it out, Default, and a
// Config built in code.
func TestStrictDefault(t *testing.T) {
	off, err := config.Parse([]byte("name = \"x\"\nstrict = false\n"), "x.hcl")
	if err != nil {
		t.Fatal(err)
	}
	on, err := config.Parse([]byte("name = \"x\"\nstrict = true\n"), "x.hcl")
	if err != nil {
		t.Fatal(err)
	}
	set := &config.Config{Name: "x"}
	set.SetStrict(false)
	for _, c := range []struct {
		name string
		c    *config.Config
		want bool
	}{
		{"a file with strict = false", off, false},
		{"a file with strict = true", on, true},
		{"Default", config.Default("x"), true},
		{"a Config built in code", &config.Config{Name: "x"}, true},
		{"SetStrict(false)", set, false},
	} {
		if got := c.c.IsStrict(); got != c.want {
			t.Errorf("%s: IsStrict() = %v, want %v", c.name, got, c.want)
		}
	}
}

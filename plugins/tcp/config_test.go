package tcp_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/plugins/tcp"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/conf"
)

func TestConfig(t *testing.T) {
	good := []string{
		``,
		`listen = ["127.0.0.1:0"]`,
		"listen = [\"127.0.0.1:0\"]\nconnections_per_peer = 64\nmax_frame = \"4KiB\"\nio_timeout = \"250ms\"",
		`max_frame = "1GiB"`,
		`max_frame = 65536`,
		`max_frame = "16MB"`,
		`advertise = ["10.0.0.1:7100"]`,
		`priority_connection = false`,
		`bulk_nice = 0`,
		`bulk_nice = 19`,
		`bulk_chunk = "16KiB"`,
		`bulk_chunk = 0`,
		"bulk_nice = 10\nbulk_chunk = \"1GiB\"",
		"bulk_nice = 10\nshort_slices = true",
		`priority_thread = false`,
		"bulk_nice = 10\npriority_thread = true",
		`bulk_buffer = "256KiB"`,
		`bulk_buffer = 0`,
	}
	for _, c := range good {
		tr := tcp.New(tcp.WithLogger(hclog.NewNullLogger()))
		if _, err := tr.Start(context.Background(), sdk.StartConfig{Engine: "e", Config: []byte(c), ConfigFile: "ferry.hcl", ConfigLine: 10, ConfigColumn: 3}); err != nil {
			t.Errorf("config %q: %v", c, err)
		}
		if err := tr.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	bad := []struct{ config, want string }{
		{`connections_per_peer = 0`, "ferry.hcl:10:26: tcp config: connections_per_peer"},
		{"\n connections_per_peer = 65", "ferry.hcl:11:25: tcp config: connections_per_peer"},
		{`max_frame = "12 parsecs"`, "ferry.hcl:10:15: tcp config: max_frame"},
		{`max_frame = "2GiB"`, "max_frame"},
		{`max_frame = "1KiB"`, "max_frame"},
		{`io_timeout = "soon"`, "ferry.hcl:10:16: tcp config: io_timeout"},
		{`io_timeout = "0s"`, "io_timeout"},
		{`listen = []`, "listen"},
		{`listen = ["nonsense"]`, "listen"},
		{`listen = ["127.0.0.1:7100", "127.0.0.1:7100"]`, "twice"},
		{`listen = ["256.0.0.1:1"]`, "listen 256.0.0.1:1"},
		{`unknown = 1`, "ferry.hcl:10"},
		{`connections_per_peer = "many"`, "ferry.hcl:10"},
		{`priority_connection = "sometimes"`, "ferry.hcl:10:25: tcp config: priority_connection: want true or false"},
		{`bulk_nice = 20`, "ferry.hcl:10:15: tcp config: bulk_nice"},
		{`bulk_nice = -1`, "ferry.hcl:10:15: tcp config: bulk_nice"},
		{`bulk_chunk = "1KiB"`, "ferry.hcl:10:16: tcp config: bulk_chunk"},
		{`bulk_chunk = "2GiB"`, "ferry.hcl:10:16: tcp config: bulk_chunk"},
		{`bulk_chunk = "a lot"`, "ferry.hcl:10:16: tcp config: bulk_chunk"},
		{`bulk_buffer = "1KiB"`, "ferry.hcl:10:17: tcp config: bulk_buffer"},
		{`bulk_buffer = "2GiB"`, "ferry.hcl:10:17: tcp config: bulk_buffer"},
		{`short_slices = "yes please"`, "ferry.hcl:10"},
	}
	for _, c := range bad {
		tr := tcp.New(tcp.WithLogger(hclog.NewNullLogger()))
		_, err := tr.Start(context.Background(), sdk.StartConfig{Engine: "e", Config: []byte(c.config), ConfigFile: "ferry.hcl", ConfigLine: 10, ConfigColumn: 3})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("config %q: error %v, want it to contain %q", c.config, err, c.want)
		}
		if err := tr.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestConfigClusterSecret(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "0123456789abcdef\n")
	write("relative", "0123456789abcdef")
	short := write("short", "0123456789abcde\r\n") // 15 bytes once the newline is trimmed
	start := func(config string) error {
		tr := tcp.New(tcp.WithLogger(hclog.NewNullLogger()))
		_, err := tr.Start(context.Background(), sdk.StartConfig{Engine: "e", Config: []byte(config),
			ConfigFile: filepath.Join(dir, "ferry.hcl"), ConfigLine: 10, ConfigColumn: 3})
		if err := tr.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		return err
	}
	for _, c := range []string{
		`cluster_secret = "0123456789abcdef"`,
		`cluster_secret_file = "` + good + `"`,
		`cluster_secret_file = "relative"`, // next to the config file
		"max_connections = 1\nmax_connections_per_host = 1\nhandshake_timeout = \"1ms\"",
		"max_connections = 1048576\nmax_connections_per_host = 1048576\nhandshake_timeout = \"1h\"",
		`max_startups = "10:30:100"`,
		"max_connections_per_peer = 1\nmax_connections = 1",
		`max_startups = "1"`,
		`max_startups = "5:0:5"`,
	} {
		if err := start(c); err != nil {
			t.Errorf("config %q: %v", c, err)
		}
	}
	hcl := filepath.Join(dir, "ferry.hcl")
	bad := []struct{ config, want string }{
		{`cluster_secret = "0123456789abcde"`, hcl + ":10:20: tcp config: cluster_secret: 15 bytes is too short; use at least 16"},
		{`cluster_secret = ""`, hcl + ":10:20: tcp config: cluster_secret: 0 bytes is too short"},
		{"cluster_secret = \"0123456789abcdef\"\ncluster_secret_file = \"" + good + "\"", hcl + ":10:20: tcp config: cluster_secret: cluster_secret and cluster_secret_file are both set; keep one"},
		{`cluster_secret_file = "missing"`, hcl + ":10:25: tcp config: cluster_secret_file: open " + filepath.Join(dir, "missing") + ": no such file or directory; make the file readable by the plugin"},
		{`cluster_secret_file = "` + dir + `"`, hcl + ":10:25: tcp config: cluster_secret_file: read " + dir + ": is a directory"},
		{`cluster_secret_file = "` + short + `"`, hcl + ":10:25: tcp config: cluster_secret_file: " + short + ": the secret is 15 bytes, too short"},
		{`cluster_secret_file = ""`, hcl + ":10:25: tcp config: cluster_secret_file: empty path"},
		{`cluster_secret = 12`, hcl + ":10:20: tcp config: cluster_secret: 2 bytes is too short"},
		{`max_connections = 0`, hcl + ":10:21: tcp config: max_connections: 0 is outside"},
		{`max_connections_per_host = -1`, hcl + ":10:30: tcp config: max_connections_per_host: -1 is outside"},
		{`max_connections_per_peer = 0`, hcl + ":10:30: tcp config: max_connections_per_peer: 0 is outside"},
		{`max_startups = "10:30"`, hcl + `:10:18: tcp config: max_startups: "10:30" is not start:rate:full; write "start:rate:full"`},
		{`max_startups = "a:30:100"`, hcl + `:10:18: tcp config: max_startups: "a:30:100" has "a", not a number`},
		{`max_startups = "10:101:100"`, hcl + `:10:18: tcp config: max_startups: "10:101:100" has a rate over 100 (percent)`},
		{`max_startups = "100:30:10"`, hcl + `:10:18: tcp config: max_startups: "100:30:10" has start over full`},
		{`max_startups = "0"`, hcl + `:10:18: tcp config: max_startups: "0" is outside 1..1048576`},
		{`handshake_timeout = "soon"`, hcl + ":10:23: tcp config: handshake_timeout"},
		{`handshake_timeout = "2h"`, hcl + ":10:23: tcp config: handshake_timeout: 2h0m0s is outside 1ms..1h"},
	}
	for _, c := range bad {
		if err := start(c.config); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("config %q: error %v, want it to contain %q", c.config, err, c.want)
		}
	}
}

// TestSettingsTable checks the table that declares the config block.
func TestSettingsTable(t *testing.T) {
	for _, p := range conf.Lint("tcp", tcp.Settings) {
		t.Error(p)
	}
}

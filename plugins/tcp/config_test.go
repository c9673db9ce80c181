package tcp_test

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/plugins/tcp"
	"github.com/ferrydev/ferry/sdk"
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

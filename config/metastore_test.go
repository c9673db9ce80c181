package config_test

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/config"
)

func TestParseClusterMetastores(t *testing.T) {
	tests := []struct {
		name, body string
		want       config.Metastore
	}{
		{"redis", `
  kind     = "redis"
  address  = "10.0.0.1:6379"
  username = "ferry"
  password = "pw"
  database = 3
  tls      = true
  ca_file  = "ca.pem"
  ttl      = "2s"
  prefix   = "cluster-a/"
`, config.Metastore{Kind: "redis", Address: "10.0.0.1:6379", Username: "ferry", Password: "pw", Database: 3,
			TLS: true, CAFile: "/etc/ferry/ca.pem", TTL: 2 * time.Second, Prefix: "cluster-a/"}},
		{"etcd", `
  kind      = "etcd"
  endpoints = ["http://10.0.0.1:2379", "10.0.0.2:2379"]
`, config.Metastore{Kind: "etcd", Endpoints: []string{"http://10.0.0.1:2379", "10.0.0.2:2379"}}},
		{"etcd https", `
  kind      = "etcd"
  endpoints = ["https://etcd.example:2379"]
  tls       = true
`, config.Metastore{Kind: "etcd", Endpoints: []string{"https://etcd.example:2379"}, TLS: true}},
		{"ttl and prefix with embedded", `
  ttl    = "30s"
  prefix = "x/"
`, config.Metastore{Kind: "embedded", Listen: "127.0.0.1:0", TTL: 30 * time.Second, Prefix: "x/"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Parse([]byte("name = \"a\"\nmetastore {"+tt.body+"}\n"), filepath.Join("/etc/ferry", "e.hcl"))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.Metastore, tt.want) {
				t.Errorf("Metastore = %+v, want %+v", c.Metastore, tt.want)
			}
		})
	}
}

func TestMetastoreDefaults(t *testing.T) {
	var m config.Metastore
	if m.LeaseTTL() != 5*time.Second || m.KeyPrefix() != "ferry/" {
		t.Errorf("defaults: ttl %v, prefix %q", m.LeaseTTL(), m.KeyPrefix())
	}
	m = config.Metastore{TTL: time.Minute, Prefix: "p/"}
	if m.LeaseTTL() != time.Minute || m.KeyPrefix() != "p/" {
		t.Errorf("set: ttl %v, prefix %q", m.LeaseTTL(), m.KeyPrefix())
	}
}

func TestMetastoreErrors(t *testing.T) {
	tests := []struct {
		name, body string
		want       []string
	}{
		{"redis without address", "  kind = \"redis\"\n", []string{`t.hcl:2:1: metastore.address: is required with kind = "redis"`}},
		{"redis bad address", "  kind = \"redis\"\n  address = \"redis\"\n", []string{`t.hcl:4:13: metastore.address: "redis": not a host:port`}},
		{"redis negative db", "  kind = \"redis\"\n  address = \"h:1\"\n  database = -1\n", []string{`t.hcl:5:14: metastore.database: -1 is negative`}},
		{"redis db not a number", "  kind = \"redis\"\n  address = \"h:1\"\n  database = \"x\"\n", []string{`t.hcl:5:14: metastore.database: want a whole number`}},
		{"redis with endpoints", "  kind = \"redis\"\n  address = \"h:1\"\n  endpoints = [\"h:2\"]\n", []string{`t.hcl:5:15: metastore.endpoints: is only used with kind = "etcd"`}},
		{"redis with listen", "  kind = \"redis\"\n  address = \"h:1\"\n  listen = \"h:2\"\n", []string{`t.hcl:5:12: metastore.listen: is only used with kind = "embedded"`}},
		{"etcd without endpoints", "  kind = \"etcd\"\n", []string{`t.hcl:2:1: metastore.endpoints: is required with kind = "etcd"`}},
		{"etcd endpoints not a list", "  kind = \"etcd\"\n  endpoints = 5\n", []string{`t.hcl:4:15: metastore.endpoints: want a list of strings`}},
		{"etcd bad endpoint", "  kind = \"etcd\"\n  endpoints = [\"ftp://h:1\"]\n", []string{`t.hcl:4:15: metastore.endpoints: "ftp://h:1": the scheme must be http or https`}},
		{"etcd endpoint without port", "  kind = \"etcd\"\n  endpoints = [\"http://h\"]\n", []string{`metastore.endpoints: "http://h": not a host:port`}},
		{"etcd https without tls", "  kind = \"etcd\"\n  endpoints = [\"https://h:1\"]\n", []string{`metastore.endpoints: "https://h:1" is https: set tls = true`}},
		{"etcd with address and database", "  kind = \"etcd\"\n  endpoints = [\"h:1\"]\n  address = \"h:2\"\n  database = 1\n",
			[]string{`t.hcl:5:13: metastore.address: is only used with kind = "redis"`, `t.hcl:6:14: metastore.database: is only used with kind = "redis"`}},
		{"username without password", "  kind = \"redis\"\n  address = \"h:1\"\n  username = \"u\"\n", []string{`t.hcl:5:14: metastore.username: is set without a password`}},
		{"ca_file without tls", "  kind = \"redis\"\n  address = \"h:1\"\n  ca_file = \"ca.pem\"\n", []string{`t.hcl:5:13: metastore.ca_file: is set but tls is off`}},
		{"tls not a bool", "  kind = \"redis\"\n  address = \"h:1\"\n  tls = \"maybe\"\n", []string{`t.hcl:5:9: metastore.tls: want true or false`}},
		{"password with embedded", "  password = \"pw\"\n", []string{`t.hcl:3:14: metastore.password: is only used with kind = "redis" or kind = "etcd"`}},
		{"ttl too short", "  ttl = \"100ms\"\n", []string{`t.hcl:3:9: metastore.ttl: 100ms is outside 1s..1h0m0s`}},
		{"ttl zero", "  ttl = \"0s\"\n", []string{`t.hcl:3:9: metastore.ttl: 0s is outside`}},
		{"ttl not a duration", "  ttl = 5\n", []string{`t.hcl:3:9: metastore.ttl: want a duration string`}},
		{"empty prefix", "  prefix = \"\"\n", []string{`t.hcl:3:12: metastore.prefix: "" must be 1 to 255 bytes`}},
		{"prefix with space", "  prefix = \"a b/\"\n", []string{`t.hcl:3:12: metastore.prefix: "a b/" must be`}},
		{"unknown attribute", "  hosts = [\"h:1\"]\n", []string{`t.hcl:3:3: Unsupported argument`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse([]byte("name = \"a\"\nmetastore {\n"+tt.body+"}\n"), "t.hcl")
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
		})
	}
}

func TestClusterExamples(t *testing.T) {
	r, err := config.Load(filepath.Join("examples", "redis.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Metastore.Kind != config.MetastoreRedis || r.Metastore.Address == "" || r.Metastore.LeaseTTL() != 5*time.Second {
		t.Errorf("redis example: %+v", r.Metastore)
	}
	e, err := config.Load(filepath.Join("examples", "etcd.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	if e.Metastore.Kind != config.MetastoreEtcd || len(e.Metastore.Endpoints) != 1 {
		t.Errorf("etcd example: %+v", e.Metastore)
	}
}

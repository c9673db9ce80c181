package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestParseMetastoreURL: each scheme becomes its kind's settings; what
// cannot be read says what was wrong and which forms are taken.
func TestParseMetastoreURL(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Metastore
	}{
		{"http://10.0.0.1:7070/metadata", Metastore{Kind: MetastoreHTTP, URL: "http://10.0.0.1:7070/metadata"}},
		{"https://meta:443/metadata", Metastore{Kind: MetastoreHTTP, URL: "https://meta:443/metadata"}},
		{"redis://127.0.0.1:6379", Metastore{Kind: MetastoreRedis, Address: "127.0.0.1:6379"}},
		{"redis://ferry:s3cret@10.0.0.1:6380/2", Metastore{Kind: MetastoreRedis, Address: "10.0.0.1:6380", Username: "ferry", Password: "s3cret", Database: 2}},
		{"rediss://10.0.0.1:6380", Metastore{Kind: MetastoreRedis, Address: "10.0.0.1:6380", TLS: true}},
		{"etcd://127.0.0.1:2379", Metastore{Kind: MetastoreEtcd, Endpoints: []string{"http://127.0.0.1:2379"}}},
		{"etcd://a:2379,b:2379", Metastore{Kind: MetastoreEtcd, Endpoints: []string{"http://a:2379", "http://b:2379"}}},
		{"etcds://u:p@[::1]:2379", Metastore{Kind: MetastoreEtcd, Endpoints: []string{"https://[::1]:2379"}, Username: "u", Password: "p", TLS: true}},
	} {
		got, err := ParseMetastoreURL(c.in)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseMetastoreURL(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	for in, why := range map[string]string{
		"127.0.0.1:6379":           "no scheme",
		"mongodb://h:1":            `unknown scheme "mongodb"`,
		"redis://h":                "not a host:port",
		"redis://h:1/zero":         `the database "zero" is not a number`,
		"redis://ferry@h:1":        "a user without a password",
		"etcd://h:1/x":             "etcd takes no path",
		"etcd://h:1,h":             "not a host:port",
		"http://h:1/metadata?k=v":  "remove the query",
		"redis://h:99999":          "port",
		"etcd://":                  "no scheme",
		"redis://u:p@h:1/db/extra": "is not a number",
	} {
		_, err := ParseMetastoreURL(in)
		if err == nil || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), "redis://[user:password@]host:port") {
			t.Errorf("ParseMetastoreURL(%q): %v; want an error saying %q and the forms taken", in, err, why)
		}
	}
}

// TestSetMetastoreOverridesTheFile: a file's redis block overridden by
// an HTTP or etcd metastore validates, with the file's ttl and prefix
// kept, and the file's redis lines blamed for nothing.
func TestSetMetastoreOverridesTheFile(t *testing.T) {
	src := `name = "b"
metastore {
  kind     = "redis"
  address  = "127.0.0.1:6379"
  database = 3
  ttl      = "7s"
  prefix   = "lab/"
}
`
	for _, url := range []string{"http://127.0.0.1:7070/metadata", "etcd://127.0.0.1:2379", "redis://127.0.0.1:6380"} {
		c, err := Parse([]byte(src), "b.hcl")
		if err != nil {
			t.Fatal(err)
		}
		m, err := ParseMetastoreURL(url)
		if err != nil {
			t.Fatal(err)
		}
		c.SetMetastore(m)
		if err := c.Validate(); err != nil {
			t.Errorf("%s over a redis block: %v", url, err)
		}
		if c.Metastore.TTL != 7*time.Second || c.Metastore.Prefix != "lab/" || c.Metastore.Database != m.Database {
			t.Errorf("%s over a redis block: %+v; want the file's ttl and prefix, and the URL's database", url, c.Metastore)
		}
	}
}

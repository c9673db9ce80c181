package config_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/plugins/tcp"
	"github.com/ferrydev/ferry/sdk"
	"github.com/hashicorp/hcl/v2"
)

// TestExamples loads every file in examples/, validates it, and hands each
// tcp plugin block to the tcp plugin's own schema, so the examples stay
// runnable as the schemas change.
func TestExamples(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("examples", "*.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 3 {
		t.Fatalf("found %d examples, want at least 3: %v", len(files), files)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			c, err := config.Load(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			for _, p := range c.Plugins {
				if p.Name != "tcp" {
					continue
				}
				if err := tcp.New().CheckConfig(context.Background(), startConfig(p)); err != nil {
					t.Errorf("plugin %q: %v", p.Name, err)
				}
			}
		})
	}
}

// TestTwoEnginesMeet checks that engine B's metastore URL is where engine A
// serves it.
func TestTwoEnginesMeet(t *testing.T) {
	a, err := config.Load(filepath.Join("examples", "two-engines-a.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := config.Load(filepath.Join("examples", "two-engines-b.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Metastore.Kind != config.MetastoreEmbedded || b.Metastore.Kind != config.MetastoreHTTP {
		t.Fatalf("kinds: a %q, b %q", a.Metastore.Kind, b.Metastore.Kind)
	}
	if want := "http://" + a.Metastore.Listen + "/metadata"; b.Metastore.URL != want {
		t.Errorf("b's url = %q, want %q", b.Metastore.URL, want)
	}
	if a.Name == b.Name {
		t.Errorf("both engines are named %q", a.Name)
	}
	// Their tcp plugins must share the cluster secret, or they cannot
	// connect.
	secret := func(c *config.Config) string {
		for _, p := range c.Plugins {
			if p.Name != "tcp" {
				continue
			}
			var tc struct {
				ClusterSecret *string  `hcl:"cluster_secret,optional"`
				Rest          hcl.Body `hcl:",remain"`
			}
			if err := sdk.DecodeConfig(startConfig(p), &tc); err != nil {
				t.Fatal(err)
			}
			if tc.ClusterSecret != nil {
				return *tc.ClusterSecret
			}
		}
		return ""
	}
	if sa, sb := secret(a), secret(b); sa != sb {
		t.Errorf("cluster secrets differ: %q and %q", sa, sb)
	}
}

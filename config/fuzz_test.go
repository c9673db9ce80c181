package config_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/hcl/v2"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/sdk"
)

// FuzzParse feeds arbitrary bytes to Parse. It must never panic; a config it
// accepts must validate, and every plugin body it cuts out must be handed to
// a plugin without panicking either.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("examples", "*.hcl"))
	for _, name := range files {
		if src, err := os.ReadFile(name); err == nil {
			f.Add(src)
		}
	}
	f.Add([]byte(fullFile))
	f.Add([]byte(operatorFile(`    connections_per_peer = "two"`)))
	f.Add([]byte("name = \"a\"\nplugin \"x\" {\n  config { a = 1 }\n}\n"))
	f.Add([]byte("name = \"a\"\ntransfer {\n  slice_size = \"1.5MiB\"\n  ring_depth = 1e400\n}\n"))
	f.Add([]byte("name = \"a\"\nplugin \"x\" {\n  config {\n"))
	f.Add([]byte("name = \"\xff\"\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		c, err := config.Parse(src, "fuzz.hcl")
		if err != nil {
			if c != nil {
				t.Fatal("config returned with an error")
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that Validate rejects: %v", err)
		}
		for _, p := range c.Plugins {
			var rest struct {
				Body hcl.Body `hcl:",remain"`
			}
			_ = sdk.DecodeConfig(startConfig(p), &rest)
		}
	})
}

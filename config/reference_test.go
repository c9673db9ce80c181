package config_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/devices/cuda"
	"github.com/ferrydev/ferry/devices/rocm"
	"github.com/ferrydev/ferry/plugins/fault"
	"github.com/ferrydev/ferry/plugins/nvlink"
	"github.com/ferrydev/ferry/plugins/shm"
	"github.com/ferrydev/ferry/plugins/simdev"
	"github.com/ferrydev/ferry/plugins/tcp"
)

var update = flag.Bool("update", false, "rewrite docs/config.md from the config tables")

// TestReference keeps docs/config.md what the tables generate. After a
// change to a table, run: go test ./config -run TestReference -update
func TestReference(t *testing.T) {
	path := filepath.Join("..", "docs", "config.md")
	want := config.Reference(tcp.Settings, shm.Settings, nvlink.Settings, fault.Settings, simdev.Settings, cuda.Settings, rocm.Settings)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v: generate it with: go test ./config -run TestReference -update", err)
	}
	if string(got) != want {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(want, "\n")
		i := 0
		for i < len(gl) && i < len(wl) && gl[i] == wl[i] {
			i++
		}
		line := func(l []string) string {
			if i < len(l) {
				return l[i]
			}
			return "<end of file>"
		}
		t.Fatalf("%s is stale from line %d:\n  have %s\n  want %s\nregenerate it with: go test ./config -run TestReference -update", path, i+1, line(gl), line(wl))
	}
	// Every setting of every block is in it.
	for _, s := range []string{"`name`", "`machine_id`", "`slice_size`", "`ring_depth`", "`stall_after`", "`ttl`", "`endpoints`",
		"`transports`", "`local_memory`", "`bandwidth_gbps`", "`sha256`", "`config { ... }`", "`match { ... }`",
		"`max_startups`", "`copy_workers`", "`streams`", "`copy_bandwidth`", "`fault \"<kind>\" { ... }`"} {
		if !strings.Contains(want, s) {
			t.Errorf("the reference lacks %s", s)
		}
	}
}

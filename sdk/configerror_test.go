package sdk

import (
	"testing"

	"github.com/hashicorp/hcl/v2"
)

func TestConfigErrorf(t *testing.T) {
	cfg := StartConfig{ConfigFile: "e.hcl", ConfigLine: 7, ConfigColumn: 3}
	at := hcl.Range{Filename: "e.hcl", Start: hcl.Pos{Line: 9, Column: 12}}
	for _, tc := range []struct {
		cfg  StartConfig
		at   hcl.Range
		want string
	}{
		{cfg, at, "e.hcl:9:12: x config: y: 5"},
		{cfg, hcl.Range{}, "e.hcl:7:3: x config: y: 5"},
		{StartConfig{}, hcl.Range{}, "x config: y: 5"},
	} {
		if got := ConfigErrorf(tc.cfg, tc.at, "x config: %s: %d", "y", 5).Error(); got != tc.want {
			t.Errorf("ConfigErrorf = %q, want %q", got, tc.want)
		}
	}
}

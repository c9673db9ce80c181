package simdev

import (
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/kit"
)

// Defaults and bounds of the configuration.
const (
	DefaultDevices = 2
	DefaultMemory  = 1 << 30
	maxDevices     = 64
	maxMemory      = 1 << 40 // the size of one device's address range
)

// Config is the plugin's `config { ... }` body; see the package comment.
type Config struct {
	Devices       *int    `hcl:"devices,optional"`
	Memory        *string `hcl:"memory,optional"`
	CopyBandwidth *string `hcl:"copy_bandwidth,optional"`

	DevicesRange       hcl.Range `hcl:"devices,attr_value_range"`
	MemoryRange        hcl.Range `hcl:"memory,attr_value_range"`
	CopyBandwidthRange hcl.Range `hcl:"copy_bandwidth,attr_value_range"`
}

// settings is Config decoded and checked.
type settings struct {
	devices   int
	memory    uint64 // per device
	bandwidth uint64 // bytes per second of Copy, all workers together; 0: unlimited
}

// parseSettings decodes cfg's body; an empty body is the defaults.
func parseSettings(cfg sdk.StartConfig) (settings, error) {
	s := settings{devices: DefaultDevices, memory: DefaultMemory}
	var c Config
	st := kit.Settings{Cfg: cfg, Prefix: "simdev config"}
	if ok, err := st.Decode(&c); !ok {
		return s, err
	}
	if err := st.Int("devices", c.Devices, c.DevicesRange, 1, maxDevices, &s.devices); err != nil {
		return s, err
	}
	if err := st.Size("memory", c.Memory, c.MemoryRange, maxMemory, &s.memory); err != nil {
		return s, err
	}
	if s.memory == 0 {
		return s, st.Errorf("memory", c.MemoryRange, "a device of 0 bytes holds nothing")
	}
	if c.CopyBandwidth != nil {
		bw, err := parseBandwidth(*c.CopyBandwidth)
		if err != nil {
			return s, st.Errorf("copy_bandwidth", c.CopyBandwidthRange, "%w", err)
		}
		s.bandwidth = bw
	}
	return s, nil
}

// parseBandwidth reads "2GB/s", "512MiB/s" (a size per second); "" and
// "unlimited" are 0, no limit.
func parseBandwidth(v string) (uint64, error) {
	t := strings.TrimSpace(v)
	if t == "" || t == "unlimited" {
		return 0, nil
	}
	size, ok := strings.CutSuffix(t, "/s")
	if !ok {
		return 0, fmt.Errorf("bandwidth %q: want a size per second (\"2GB/s\", \"512MiB/s\") or \"unlimited\"", v)
	}
	n, err := kit.ParseSize(size, 1<<50)
	if err != nil {
		return 0, fmt.Errorf("bandwidth %q: %w", v, err)
	}
	if n == 0 {
		return 0, fmt.Errorf("bandwidth %q moves nothing; leave it out for no limit", v)
	}
	return n, nil
}

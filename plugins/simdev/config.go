package simdev

import (
	"fmt"
	"strings"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/conf"
)

// Defaults and bounds of the configuration.
const (
	DefaultDevices = 2
	DefaultMemory  = 1 << 30
	maxDevices     = 64
	maxMemory      = 256 << 30 // the size of one device's address range
)

// settings is the config block decoded and checked.
type settings struct {
	devices       int
	memory        uint64 // per device
	bandwidthText string
	bandwidth     uint64 // bytes per second of Copy, all workers together; 0: unlimited
}

// Settings declares the plugin's config body (see the package comment):
// defaults, ranges and the reference (docs/config.md).
var Settings = &conf.Table[settings]{
	Name: "simdev",
	Doc:  "The simulated device plugin (`device \"simdev\" { config { ... } }`): device memory in host memory, for tests without a GPU.",
	Fields: []conf.Field[settings]{
		{Name: "devices", Type: conf.Int, Default: DefaultDevices, Min: 1, Max: maxDevices,
			Doc: "Simulated devices.",
			At:  func(s *settings) any { return &s.devices }},
		{Name: "memory", Type: conf.Size, Default: uint64(DefaultMemory), Min: int64(1), Max: int64(maxMemory), Hint: " (a device of 0 bytes holds nothing)",
			Doc: "Memory per device.",
			At:  func(s *settings) any { return &s.memory }},
		{Name: "copy_bandwidth", Type: conf.String, Default: "unlimited", Example: `"2GB/s"`,
			Doc:   `Bytes per second of Copy, all workers together, as a size per second ("2GB/s", "512MiB/s"); "unlimited": no limit.`,
			At:    func(s *settings) any { return &s.bandwidthText },
			Check: func(s *settings) (err error) { s.bandwidth, err = parseBandwidth(s.bandwidthText); return err }},
	},
}

// parseSettings decodes cfg's body; an empty body is the defaults.
func parseSettings(cfg sdk.StartConfig) (settings, error) {
	var s settings
	err := conf.Decode(cfg, "simdev config", Settings, &s, nil)
	return s, err
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
	n, err := conf.ParseSize(size)
	if err != nil {
		return 0, fmt.Errorf("bandwidth %q: %w", v, err)
	}
	if n <= 0 {
		return 0, fmt.Errorf("bandwidth %q moves nothing; leave it out for no limit", v)
	}
	return uint64(n), nil
}

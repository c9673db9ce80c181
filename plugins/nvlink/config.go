package nvlink

import (
	"context"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/conf"
	"github.com/ferrydev/ferry/sdk/kit"
	"github.com/ferrydev/ferry/sdk/kit/samehost"
)

// The plugin's `config { ... }` block (Settings declares it):
//
//	config {
//	  streams        = 4        # copy streams (goroutines, each with a CUDA stream per device)
//	  split_min      = "8MiB"   # copies from this size are sliced across the streams
//	  revoke_timeout = "5s"     # how long UnregisterMemory waits for peers to drop a region
//	  max_conns      = 1024     # connections from peer plugins served at once
//	  cluster_secret_file = "/etc/ferry/secret"  # or cluster_secret: peers prove they know it
//	}
//
// Every attribute is optional.
// Defaults and limits.
const (
	DefaultStreams       = 4
	MaxStreams           = 64
	DefaultSplitMin      = 8 << 20
	DefaultRevokeTimeout = samehost.DefaultRevokeTimeout
	// minChunk is the smallest piece a sliced copy is cut into.
	minChunk = 2 << 20
)

type settings struct {
	streams  int
	splitMin uint64
	// The exchange's: revoke_timeout, max_conns, the cluster secret.
	samehost.Settings
}

func defaultSettings() settings {
	return settings{streams: DefaultStreams, splitMin: DefaultSplitMin, Settings: samehost.DefaultSettings()}
}

// Settings declares the plugin's config block: defaults, ranges and the
// reference (docs/config.md).
var Settings = &conf.Table[settings]{
	Name: "nvlink",
	Doc:  "The nvlink plugin (`plugin \"nvlink\" { config { ... } }`): GPU memory of engines on one machine, copied by CUDA peer access.",
	Fields: append([]conf.Field[settings]{
		{Name: "streams", Type: conf.Int, Default: DefaultStreams, Min: 1, Max: MaxStreams,
			Doc: "Copy streams (goroutines, each with a CUDA stream per device).",
			At:  func(s *settings) any { return &s.streams }},
		{Name: "split_min", Type: conf.Size, Default: uint64(DefaultSplitMin), Min: int64(0), Max: uint64(MaxSlice),
			Doc: "Copies from this size are sliced across the streams.",
			At:  func(s *settings) any { return &s.splitMin }},
	}, samehost.Fields(func(s *settings) *samehost.Settings { return &s.Settings })...),
}

func parseConfig(cfg sdk.StartConfig) (settings, error) {
	s := defaultSettings()
	s.Secret = kit.EngineSecret(cfg) // unless the block names its own
	if err := conf.Decode(cfg, "nvlink config", Settings, &s, func(_ *settings, b conf.Block) { samehost.Rule(b) }); err != nil {
		return settings{}, err
	}
	return s, nil
}

// CheckConfig decodes and checks cfg as Start does, starting nothing.
func (t *Transport) CheckConfig(_ context.Context, cfg sdk.StartConfig) error {
	_, err := parseConfig(cfg)
	return err
}

package nvlink

import (
	"context"

	"github.com/hashicorp/hcl/v2"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/kit"
	"github.com/ferrydev/ferry/sdk/kit/samehost"
)

// Config is the plugin's `config { ... }` block:
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
type Config struct {
	Streams       *int    `hcl:"streams,optional"`
	SplitMin      *string `hcl:"split_min,optional"`
	RevokeTimeout *string `hcl:"revoke_timeout,optional"`
	MaxConns      *int    `hcl:"max_conns,optional"`
	Secret        *string `hcl:"cluster_secret,optional"`
	SecretFile    *string `hcl:"cluster_secret_file,optional"`

	StreamsRange       hcl.Range `hcl:"streams,attr_value_range"`
	SplitMinRange      hcl.Range `hcl:"split_min,attr_value_range"`
	RevokeTimeoutRange hcl.Range `hcl:"revoke_timeout,attr_value_range"`
	MaxConnsRange      hcl.Range `hcl:"max_conns,attr_value_range"`
	SecretRange        hcl.Range `hcl:"cluster_secret,attr_value_range"`
	SecretFileRange    hcl.Range `hcl:"cluster_secret_file,attr_value_range"`
}

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

func parseConfig(cfg sdk.StartConfig) (settings, error) {
	s := defaultSettings()
	s.Secret = kit.EngineSecret(cfg) // unless the block names its own (samehost.Config.Parse)
	var c Config
	st := kit.Settings{Cfg: cfg, Prefix: "nvlink config"}
	if ok, err := st.Decode(&c); !ok {
		return s, err
	}
	if err := st.Int("streams", c.Streams, c.StreamsRange, 1, MaxStreams, &s.streams); err != nil {
		return settings{}, err
	}
	if err := st.Size("split_min", c.SplitMin, c.SplitMinRange, MaxSlice, &s.splitMin); err != nil {
		return settings{}, err
	}
	common := samehost.Config{
		RevokeTimeout: c.RevokeTimeout, RevokeTimeoutRange: c.RevokeTimeoutRange,
		MaxConns: c.MaxConns, MaxConnsRange: c.MaxConnsRange,
		Secret: c.Secret, SecretRange: c.SecretRange,
		SecretFile: c.SecretFile, SecretFileRange: c.SecretFileRange,
	}
	if err := common.Parse(st, &s.Settings); err != nil {
		return settings{}, err
	}
	return s, nil
}

// CheckConfig decodes and checks cfg as Start does, starting nothing.
func (t *Transport) CheckConfig(_ context.Context, cfg sdk.StartConfig) error {
	_, err := parseConfig(cfg)
	return err
}

package nvlink

import (
	"context"
	"path/filepath"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/kit"
)

// Config is the plugin's `config { ... }` block:
//
//	config {
//	  streams        = 4        # copy streams (goroutines, each with a CUDA stream per device)
//	  split_min      = "8MiB"   # copies from this size are sliced across the streams
//	  revoke_timeout = "5s"     # how long UnregisterMemory waits for peers to drop a region
//	  cluster_secret_file = "/etc/ferry/secret"  # or cluster_secret: peers prove they know it
//	}
//
// Every attribute is optional.
type Config struct {
	Streams       *int    `hcl:"streams,optional"`
	SplitMin      *string `hcl:"split_min,optional"`
	RevokeTimeout *string `hcl:"revoke_timeout,optional"`
	Secret        *string `hcl:"cluster_secret,optional"`
	SecretFile    *string `hcl:"cluster_secret_file,optional"`

	StreamsRange       hcl.Range `hcl:"streams,attr_value_range"`
	SplitMinRange      hcl.Range `hcl:"split_min,attr_value_range"`
	RevokeTimeoutRange hcl.Range `hcl:"revoke_timeout,attr_value_range"`
	SecretRange        hcl.Range `hcl:"cluster_secret,attr_value_range"`
	SecretFileRange    hcl.Range `hcl:"cluster_secret_file,attr_value_range"`
}

// Defaults and limits.
const (
	DefaultStreams       = 4
	MaxStreams           = 64
	DefaultSplitMin      = 8 << 20
	DefaultRevokeTimeout = 5 * time.Second
	// minChunk is the smallest piece a sliced copy is cut into.
	minChunk = 2 << 20
)

type settings struct {
	streams       int
	splitMin      uint64
	revokeTimeout time.Duration
	secret        []byte
}

func defaultSettings() settings {
	return settings{streams: DefaultStreams, splitMin: DefaultSplitMin, revokeTimeout: DefaultRevokeTimeout}
}

func parseConfig(cfg sdk.StartConfig) (settings, error) {
	s := defaultSettings()
	s.secret = kit.EngineSecret(cfg)
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
	if err := st.Duration("revoke_timeout", c.RevokeTimeout, c.RevokeTimeoutRange, time.Millisecond, time.Hour, &s.revokeTimeout); err != nil {
		return settings{}, err
	}
	switch {
	case c.Secret != nil && c.SecretFile != nil:
		return settings{}, st.Errorf("cluster_secret", c.SecretRange, "cluster_secret and cluster_secret_file are both set; keep one")
	case c.Secret != nil:
		if n := len(*c.Secret); n < kit.MinSecretLen {
			return settings{}, st.Errorf("cluster_secret", c.SecretRange, "%d bytes is too short; use at least %d random bytes, the same on every engine", n, kit.MinSecretLen)
		}
		s.secret = []byte(*c.Secret)
	case c.SecretFile != nil:
		path := *c.SecretFile
		if path == "" {
			return settings{}, st.Errorf("cluster_secret_file", c.SecretFileRange, "empty path; name the file that holds the cluster secret")
		}
		if !filepath.IsAbs(path) && cfg.ConfigFile != "" {
			path = filepath.Join(filepath.Dir(cfg.ConfigFile), path)
		}
		secret, err := kit.ReadSecretFile(path, "make the file readable by the plugin, or set cluster_secret instead")
		if err != nil {
			return settings{}, st.Errorf("cluster_secret_file", c.SecretFileRange, "%w", err)
		}
		s.secret = secret
	}
	return s, nil
}

// CheckConfig decodes and checks cfg as Start does, starting nothing.
func (t *Transport) CheckConfig(_ context.Context, cfg sdk.StartConfig) error {
	_, err := parseConfig(cfg)
	return err
}

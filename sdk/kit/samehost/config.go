package samehost

import (
	"path/filepath"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/ferrydev/ferry/sdk/kit"
)

// Config is the attributes of a `config { ... }` block that every
// same-machine plugin has:
//
//	revoke_timeout = "5s"     # how long UnregisterMemory waits for peers to drop a region
//	max_conns      = 1024     # connections from peer plugins served at once
//	cluster_secret_file = "/etc/ferry/secret"  # or cluster_secret: peers prove they know it
//
// A plugin declares them in its own Config (hcl tags; the decoder reads
// one struct) and hands their values here to be checked.
type Config struct {
	RevokeTimeout *string
	MaxConns      *int
	Secret        *string
	SecretFile    *string

	RevokeTimeoutRange hcl.Range
	MaxConnsRange      hcl.Range
	SecretRange        hcl.Range
	SecretFileRange    hcl.Range
}

// DefaultRevokeTimeout is revoke_timeout's default.
const DefaultRevokeTimeout = 5 * time.Second

// Settings are the checked values of Config.
type Settings struct {
	RevokeTimeout time.Duration
	MaxConns      int
	Secret        []byte // the cluster secret; nil: none (same-user peers are trusted)
}

// DefaultSettings are the values without a config block: no secret but
// the engine's (kit.EngineSecret) is Parse's business.
func DefaultSettings() Settings {
	return Settings{RevokeTimeout: DefaultRevokeTimeout, MaxConns: DefaultMaxConns}
}

// Parse checks c into s. The secret is the block's own, else the
// engine's (kit.EngineSecret).
func (c Config) Parse(st kit.Settings, s *Settings) error {
	s.Secret = kit.EngineSecret(st.Cfg)
	if err := st.Duration("revoke_timeout", c.RevokeTimeout, c.RevokeTimeoutRange, time.Millisecond, time.Hour, &s.RevokeTimeout); err != nil {
		return err
	}
	if err := st.Int("max_conns", c.MaxConns, c.MaxConnsRange, 1, 1<<20, &s.MaxConns); err != nil {
		return err
	}
	switch {
	case c.Secret != nil && c.SecretFile != nil:
		return st.Errorf("cluster_secret", c.SecretRange,
			"cluster_secret and cluster_secret_file are both set; keep one (cluster_secret_file keeps the secret out of this file)")
	case c.Secret != nil:
		if n := len(*c.Secret); n < kit.MinSecretLen {
			return st.Errorf("cluster_secret", c.SecretRange,
				"%d bytes is too short; use at least %d random bytes (for example the output of `openssl rand -hex 32`), the same on every engine", n, kit.MinSecretLen)
		}
		s.Secret = []byte(*c.Secret)
	case c.SecretFile != nil:
		path := *c.SecretFile
		if path == "" {
			return st.Errorf("cluster_secret_file", c.SecretFileRange, "empty path; name the file that holds the cluster secret")
		}
		if !filepath.IsAbs(path) && st.Cfg.ConfigFile != "" {
			path = filepath.Join(filepath.Dir(st.Cfg.ConfigFile), path)
		}
		secret, err := kit.ReadSecretFile(path, "make the file readable by the plugin, or set cluster_secret instead")
		if err != nil {
			return st.Errorf("cluster_secret_file", c.SecretFileRange, "%w", err)
		}
		s.Secret = secret
	}
	return nil
}

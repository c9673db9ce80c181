package samehost

import (
	"time"

	"github.com/ferrydev/ferry/sdk/conf"
	"github.com/ferrydev/ferry/sdk/kit"
)

// DefaultRevokeTimeout is revoke_timeout's default.
const DefaultRevokeTimeout = 5 * time.Second

// Settings are the settings every same-machine plugin has:
//
//	revoke_timeout = "5s"     # how long UnregisterMemory waits for peers to drop a region
//	max_conns      = 1024     # connections from peer plugins served at once
//	cluster_secret_file = "/etc/ferry/secret"  # or cluster_secret: peers prove they know it
//
// A plugin adds Fields to its table and Rule to its rules.
type Settings struct {
	RevokeTimeout time.Duration
	MaxConns      int
	// Secret is the cluster secret; nil: none (same-user peers are
	// trusted).
	kit.SecretSettings
}

// Fields are the rows of Settings for a table over T, whose Settings of
// returns.
func Fields[T any](of func(*T) *Settings) []conf.Field[T] {
	return append([]conf.Field[T]{
		{Name: "revoke_timeout", Type: conf.Duration, Default: DefaultRevokeTimeout, Min: time.Millisecond, Max: time.Hour,
			Doc: "How long UnregisterMemory waits for peers to drop a region.",
			At:  func(t *T) any { return &of(t).RevokeTimeout }},
		{Name: "max_conns", Type: conf.Int, Default: DefaultMaxConns, Min: 1, Max: 1 << 20,
			Doc: "Connections from peer plugins served at once.",
			At:  func(t *T) any { return &of(t).MaxConns }},
	}, kit.SecretFields(func(t *T) *kit.SecretSettings { return &of(t).SecretSettings })...)
}

// Rule checks what relates Settings' fields: one secret setting at most.
func Rule(b conf.Block) { kit.SecretRule(b) }

// DefaultSettings are the values without a config block; the plugin
// presets the engine's secret (kit.EngineSecret).
func DefaultSettings() Settings {
	return Settings{RevokeTimeout: DefaultRevokeTimeout, MaxConns: DefaultMaxConns}
}

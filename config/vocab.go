package config

import "github.com/ferrydev/ferry/internal/intent"

// Intent says what a request is for; policies match on it. It is
// internal/intent's, which the deciders import in place of config; the
// host aliases it and its values (host.Intent, host.IntentCheckpoint, ...).
type Intent = intent.Intent

// Intents lists every known intent. The selector numbers its match bits by
// this order.
var Intents = intent.All

// ParseIntent returns the intent written as s; "" is no intent.
func ParseIntent(s string) (Intent, error) { return intent.Parse(s) }

// MemoryAny matches every memory kind in a policy. The kinds themselves
// are sdk.MemoryKind.
const MemoryAny = "*"

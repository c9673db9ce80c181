package config

import "fmt"

// Intent says what a request is for; policies match on it. It never
// crosses the plugin boundary, so it lives here, beside the policies that
// name it, and not in sdk/ (where memory kinds, permissions and priorities
// live: see sdk/vocab.go). The host aliases it as host.Intent.
type Intent string

// Intents a request may declare. "" declares none.
const (
	IntentForegroundGet      Intent = "foreground_get"
	IntentBackgroundPrefetch Intent = "background_prefetch"
	IntentMigration          Intent = "migration"
	IntentCheckpoint         Intent = "checkpoint"
	IntentWeightLoading      Intent = "weight_loading"
)

// Intents lists every known intent. The selector numbers its match bits by
// this order.
var Intents = []Intent{IntentForegroundGet, IntentBackgroundPrefetch, IntentMigration, IntentCheckpoint, IntentWeightLoading}

func (i Intent) String() string { return string(i) }

// ParseIntent returns the intent written as s; "" is no intent.
func ParseIntent(s string) (Intent, error) {
	if s == "" {
		return "", nil
	}
	for _, in := range Intents {
		if string(in) == s {
			return in, nil
		}
	}
	l := make([]string, len(Intents))
	for i, in := range Intents {
		l[i] = string(in)
	}
	return "", fmt.Errorf("unknown intent %q: want one of %s", s, quoteList(l))
}

// MemoryAny matches every memory kind in a policy. The kinds themselves
// are sdk.MemoryKind.
const MemoryAny = "*"

package intent

import (
	"fmt"
	"strings"
)

// Intent says what a request is for; policies match on it.
type Intent string

// Intents a request may declare. "" declares none.
const (
	ForegroundGet      Intent = "foreground_get"
	BackgroundPrefetch Intent = "background_prefetch"
	Migration          Intent = "migration"
	Checkpoint         Intent = "checkpoint"
	WeightLoading      Intent = "weight_loading"
)

// All lists every known intent. The selector numbers its match bits by
// this order.
var All = []Intent{ForegroundGet, BackgroundPrefetch, Migration, Checkpoint, WeightLoading}

func (i Intent) String() string { return string(i) }

// Parse returns the intent written as s; "" is no intent.
func Parse(s string) (Intent, error) {
	if s == "" {
		return "", nil
	}
	for _, in := range All {
		if string(in) == s {
			return in, nil
		}
	}
	l := make([]string, len(All))
	for i, in := range All {
		l[i] = `"` + string(in) + `"`
	}
	return "", fmt.Errorf("unknown intent %q: want one of %s", s, strings.Join(l, ", "))
}

package logargs

import (
	"bytes"
	"strings"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"
)

func TestMapRewritesValuesOnly(t *testing.T) {
	var buf bytes.Buffer
	base := hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Trace, DisableTime: true})
	l := Map(base, WholeFloats).Named("tcp").With("limit", float64(1<<26))
	l.Warn("listening", "max_frame", float64(67108864), "ratio", 0.5, "name", "x")
	got := buf.String()
	for _, want := range []string{"tcp: listening", "limit=67108864", "max_frame=67108864", "ratio=0.5", "name=x"} {
		if !strings.Contains(got, want) {
			t.Errorf("log line %q lacks %q", got, want)
		}
	}
	buf.Reset()
	Map(base, Durations).Info("timeout", "after", 1500*time.Millisecond, "n", 3)
	if got := buf.String(); !strings.Contains(got, "after=1.5s") || !strings.Contains(got, "n=3") {
		t.Errorf("log line %q: want after=1.5s and n=3", got)
	}
}

func TestMapKeepsCallersArgs(t *testing.T) {
	args := []any{"d", time.Second}
	Map(hclog.NewNullLogger(), Durations).Info("x", args...)
	if args[1] != time.Second {
		t.Errorf("Map changed the caller's slice: %v", args)
	}
}

package config_test

import (
	"testing"

	"github.com/ferrydev/ferry/config"
)

// TestTraceOffWithoutBlock: a file without a trace block traces nothing,
// as a Config built in code does; with one, its defaults apply. (Every
// parsed file used to get keep = 64, so each engine started from HCL
// attached the trace recorder and paid the observer on every request.)
func TestTraceOffWithoutBlock(t *testing.T) {
	for body, want := range map[string]config.Trace{
		"":                                  {},
		"trace {}\n":                        {Keep: 64},
		"trace {\n  sample_every = 10\n}\n": {Keep: 64, SampleEvery: 10},
	} {
		c, err := config.Parse([]byte("name = \"a\"\n"+body), "t.hcl")
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		if c.Trace != want {
			t.Errorf("%q: Trace = %+v, want %+v", body, c.Trace, want)
		}
	}
	if d := config.Default("a"); d.Trace != (config.Trace{}) {
		t.Errorf("Default: Trace = %+v, want off", d.Trace)
	}
}

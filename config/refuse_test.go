package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/config"
)

// TestRefusedSettings checks that a setting that cannot take effect yet is
// refused at its file:line:col with the reason and what to do, instead of
// being accepted and then never matching.
func TestRefusedSettings(t *testing.T) {
	cases := []struct {
		name, match string
		line, col   int
		field, msg  string
	}{
		{"file segment", `segment = "file"`, 6, 15, "policy.x.match.segment",
			`"file" cannot take effect yet: file segments are not implemented, so the policy would never match; remove segment, or use "memory"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := policyPlugins + "policy \"x\" {\n  match {\n    " + tc.match + "\n  }\n  transports = [\"tcp\"]\n}\n"
			_, err := config.Parse([]byte(src), "p.hcl")
			var ce *config.Error
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want a *config.Error", err)
			}
			if ce.File != "p.hcl" || ce.Line != tc.line || ce.Column != tc.col || ce.Field != tc.field {
				t.Errorf("error at %s:%d:%d field %q, want p.hcl:%d:%d field %q", ce.File, ce.Line, ce.Column, ce.Field, tc.line, tc.col, tc.field)
			}
			if !strings.HasPrefix(ce.Msg, tc.msg) {
				t.Errorf("message\n  %s\nwant it to start with\n  %s", ce.Msg, tc.msg)
			}
		})
	}

	// What does take effect stays accepted.
	// Device memory matches since device plugins exist (device blocks).
	for _, ok := range []string{`segment = "memory"`, `local_memory = "cpu"`, `local_memory = "*"`, `remote_memory = "cpu"`, `remote_memory = "*"`,
		`local_memory = "cuda"`, `remote_memory = "rocm"`} {
		src := policyPlugins + "policy \"x\" {\n  match {\n    " + ok + "\n  }\n  transports = [\"tcp\"]\n}\n"
		if _, err := config.Parse([]byte(src), "p.hcl"); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}

	// A policy built in code is refused the same way, by field name.
	c := config.Default("a")
	c.Policies = []config.Policy{{Name: "p", Transports: []string{"tcp"}, Match: config.PolicyMatch{Segment: "file", RemoteMemory: "cuda"}}}
	err := c.Validate()
	for _, want := range []string{`policy.p.match.segment: "file" cannot take effect yet`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("in code: err = %v, want it to contain %q", err, want)
		}
	}
}

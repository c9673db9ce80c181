package config_test

import (
	"strings"
	"testing"

	"github.com/ferrydev/ferry/config"
)

func TestControlBlock(t *testing.T) {
	for _, tc := range []struct {
		name, src, want, err string
	}{
		{"default", "name = \"a\"\n", "", ""},
		{"set", "name = \"a\"\ncontrol {\n  listen = \"127.0.0.1:7071\"\n}\n", "127.0.0.1:7071", ""},
		{"empty", "name = \"a\"\ncontrol {\n  listen = \"\"\n}\n", "", `t.hcl:3:12: control.listen: is empty`},
		{"not host:port", "name = \"a\"\ncontrol {\n  listen = \"localhost\"\n}\n", "", `t.hcl:3:12: control.listen: "localhost": not a host:port`},
		{"bad port", "name = \"a\"\ncontrol {\n  listen = \"h:99999\"\n}\n", "", `t.hcl:3:12: control.listen: "h:99999": port "99999"`},
		{"unknown attribute", "name = \"a\"\ncontrol {\n  port = 1\n}\n", "", `t.hcl:3:3: Unsupported argument`},
		{"twice", "name = \"a\"\ncontrol {}\ncontrol {}\n", "", `t.hcl:3:1: control: a second control block; the first is at t.hcl:2:1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Parse([]byte(tc.src), "t.hcl")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Control.Listen != tc.want {
				t.Errorf("Control.Listen = %q, want %q", c.Control.Listen, tc.want)
			}
		})
	}
}

func TestControlInCode(t *testing.T) {
	c := config.Default("a")
	if c.Control.Listen != "" {
		t.Errorf("Default: Listen = %q, want \"\" (the engine chooses)", c.Control.Listen)
	}
	c.Control = config.Control{}
	if err := c.Validate(); err != nil {
		t.Errorf("zero Control: %v", err)
	}
	if c.Control.Listen != "" {
		t.Errorf("zero Control: Listen = %q", c.Control.Listen)
	}
	c.Control.Listen = "nope"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "control.listen") {
		t.Errorf("bad listen: err = %v", err)
	}
}

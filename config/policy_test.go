package config_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/config"
)

const policyPlugins = `name = "p"
plugin "tcp" {}
plugin "shm" {}
`

func TestParsePolicies(t *testing.T) {
	src := policyPlugins + `
policy "kv-local" {
  match {
    segment       = "memory"
    same_machine  = true
    local_memory  = "cpu"
    remote_memory = "*"
    min_size      = 1
    max_size      = "1MiB"
    priorities    = ["high", "normal"]
    intents       = ["foreground_get", "background_prefetch"]
  }
  transports = ["shm", "tcp"]
  rails      = ["a", "b"]
}
policy "all" {
  transports = ["tcp"]
}
`
	c, err := config.Parse([]byte(src), "p.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Policies) != 2 {
		t.Fatalf("%d policies, want 2", len(c.Policies))
	}
	yes := true
	p := c.Policies[0]
	want := config.PolicyMatch{Segment: "memory", SameMachine: &yes, LocalMemory: "cpu", RemoteMemory: "*", MinSize: 1, MaxSize: 1 << 20,
		Priorities: []string{"high", "normal"}, Intents: []string{"foreground_get", "background_prefetch"}}
	if p.Name != "kv-local" || !reflect.DeepEqual(p.Match, want) || !reflect.DeepEqual(p.Transports, []string{"shm", "tcp"}) || !reflect.DeepEqual(p.Rails, []string{"a", "b"}) {
		t.Errorf("policy = %+v, match %+v", p, p.Match)
	}
	if p.DeclRange != "p.hcl:5:1" {
		t.Errorf("DeclRange = %q", p.DeclRange)
	}
	if a := c.Policies[1]; a.Name != "all" || !reflect.DeepEqual(a.Match, config.PolicyMatch{}) {
		t.Errorf("second policy = %+v", a)
	}
}

func TestPolicyErrors(t *testing.T) {
	cases := []struct {
		name, body string
		want       string // "file:line:col: ..." prefix and message part
	}{
		{"unknown transport", `policy "x" {
  transports = ["shm", "rdma"]
}`, `p.hcl:5:16: policy.x.transports: "rdma" is not a configured plugin`},
		{"transports missing", `policy "x" {
}`, `p.hcl:4:12: Missing required argument`},
		{"transports empty", `policy "x" {
  transports = []
}`, `p.hcl:5:16: policy.x.transports: lists no transports`},
		{"listed twice", `policy "x" {
  transports = ["tcp", "tcp"]
}`, `"tcp" is listed twice`},
		{"duplicate policy", `policy "x" {
  transports = ["tcp"]
}
policy "x" {
  transports = ["shm"]
}`, `p.hcl:7:1: policy.x: policy "x" is declared twice; the first is at p.hcl:4:1`},
		{"bad name", `policy "X Y" {
  transports = ["tcp"]
}`, `p.hcl:4:8: policy.X Y: policy name "X Y"`},
		{"segment", `policy "x" {
  match {
    segment = "disk"
  }
  transports = ["tcp"]
}`, `p.hcl:6:15: policy.x.match.segment: "disk": want "memory" or "file"`},
		{"memory kind", `policy "x" {
  match {
    remote_memory = "tpu"
  }
  transports = ["tcp"]
}`, `p.hcl:6:21: policy.x.match.remote_memory: "tpu"`},
		{"intent", `policy "x" {
  match {
    intents = ["gossip"]
  }
  transports = ["tcp"]
}`, `p.hcl:6:15: policy.x.match.intents: "gossip": want any of`},
		{"priority", `policy "x" {
  match {
    priorities = ["urgent"]
  }
  transports = ["tcp"]
}`, `p.hcl:6:18: policy.x.match.priorities: "urgent"`},
		{"sizes", `policy "x" {
  match {
    min_size = "2MiB"
    max_size = "1MiB"
  }
  transports = ["tcp"]
}`, `p.hcl:6:16: policy.x.match.min_size: 2097152 bytes is above max_size`},
		{"bad size", `policy "x" {
  match {
    max_size = "lots"
  }
  transports = ["tcp"]
}`, `p.hcl:6:16: policy.x.match.max_size:`},
		{"same_machine type", `policy "x" {
  match {
    same_machine = "sometimes"
  }
  transports = ["tcp"]
}`, `p.hcl:6:20: policy.x.match.same_machine: want true or false`},
		{"unknown attribute", `policy "x" {
  match {
    color = "red"
  }
  transports = ["tcp"]
}`, `p.hcl:6:5: Unsupported argument`},
		{"two match blocks", `policy "x" {
  match {}
  match {}
  transports = ["tcp"]
}`, `p.hcl:6:3: policy.x.match: a second match block; the first is at p.hcl:5:3`},
		{"no label", `policy {
  transports = ["tcp"]
}`, `p.hcl:4:8: Missing name for policy`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(policyPlugins+tc.body+"\n"), "p.hcl")
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error\n%v\nlacks %q", err, tc.want)
			}
			var ce *config.Error
			if !errors.As(err, &ce) || ce.File != "p.hcl" || ce.Line == 0 {
				t.Errorf("not a located *config.Error: %#v", ce)
			}
		})
	}
}

// A policy built in code is checked too: the error names the field.
func TestValidatePolicyInCode(t *testing.T) {
	c := config.Default("x")
	c.Policies = []config.Policy{{Name: "p", Transports: []string{"rdma"}}}
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), `policy.p.transports: "rdma" is not a configured plugin (configured: "tcp", "shm")`) {
		t.Fatalf("err = %v", err)
	}
}

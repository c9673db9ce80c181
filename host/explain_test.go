package host_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
)

// TestExplain: on one machine a small request goes over shm because the
// kv-local policy says so, and the explanation says both; a hint pins tcp
// and the explanation names it; an unknown policy is an error; and the
// request still moves through the transport the selector chose.
func TestExplain(t *testing.T) {
	ctx := context.Background()
	yes := true
	cfg := config.Default("explain-a")
	cfg.PluginDir = binDir
	cfg.Policies = []config.Policy{{
		Name:       "kv-local",
		Match:      config.PolicyMatch{SameMachine: &yes, MaxSize: 1 << 20},
		Transports: []string{"shm", "tcp"},
	}}
	a, err := host.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := startPeer(t, "--name", "explain-b", "--metastore", a.MetastoreURL(), "--expose", "4MiB")
	seg, err := a.OpenSegment(ctx, "explain-b")
	if err != nil {
		t.Fatal(err)
	}
	base := b.Ready.Buffers[0].Base
	cases := []struct {
		name string
		req  host.Request
		want []string
		err  error
	}{
		{"same machine, policy", host.Request{Op: host.Write, Local: make([]byte, 4096)},
			[]string{`policy "kv-local" matched (same_machine = true, size <= 1MiB)`, "shm: taken (in the policy's order)", "tcp: usable, a later attempt"}, nil},
		{"hint", host.Request{Op: host.Write, Local: make([]byte, 4096), Transport: "tcp"},
			[]string{"hint: tcp", "tcp: taken (pinned by the request's transport hint)"}, nil},
		{"too big for the policy", host.Request{Op: host.Read, Local: make([]byte, 2<<20)},
			[]string{"no policy matched", "shm: taken (same machine: same-machine transports first)"}, nil},
		{"explicit policy", host.Request{Op: host.Read, Local: make([]byte, 2<<20), Policy: "kv-local", Intent: host.IntentCheckpoint},
			[]string{`policy "kv-local": named by the request`, "intent checkpoint", "shm: taken"}, nil},
		{"unknown policy", host.Request{Op: host.Read, Local: make([]byte, 1), Policy: "nope"}, nil, host.ErrInvalid},
		{"unknown hint", host.Request{Op: host.Read, Local: make([]byte, 1), Transport: "carrier-pigeon"}, []string{"carrier-pigeon"}, host.ErrTransportUnavailable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.Segment, tc.req.Remote = seg.ID, base
			text, err := a.Explain(tc.req)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v\n%s", err, tc.err, text)
			}
			for _, w := range tc.want {
				if !strings.Contains(text, w) && !strings.Contains(fmt.Sprint(err), w) {
					t.Errorf("explanation lacks %q:\n%s", w, text)
				}
			}
		})
	}

	// The plan is what Submit does: the transfer goes through, and a
	// task with an unknown policy ends INVALID.
	buf, err := a.Allocate(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Free(buf)
	if _, err := a.Register(ctx, buf, host.LocalOnly); err != nil {
		t.Fatal(err)
	}
	if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: buf, Segment: seg.ID, Remote: base, Intent: host.IntentForegroundGet}); err != nil {
		t.Fatal(err)
	}
	err = a.Transfer(ctx, host.Request{Op: host.Write, Local: buf, Segment: seg.ID, Remote: base, Policy: "nope"})
	if !errors.Is(err, host.ErrInvalid) {
		t.Fatalf("unknown policy: %v", err)
	}
}

// TestFerryExplain runs `ferry explain` against a peer on this machine.
func TestFerryExplain(t *testing.T) {
	dir := t.TempDir()
	src := fmt.Sprintf(`name = "fx"
plugin_dir = %q
metastore {
  kind   = "embedded"
  listen = "127.0.0.1:0"
}
plugin "tcp" {
  config {
    listen = ["127.0.0.1:0"]
  }
}
plugin "shm" {}
policy "kv-local" {
  match {
    same_machine = true
    max_size     = "1MiB"
  }
  transports = ["shm", "tcp"]
}
`, binDir)
	cfgPath := filepath.Join(dir, "fx.hcl")
	if err := os.WriteFile(cfgPath, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	a := newEngine(t, "fx-meta") // serves the metastore
	startPeer(t, "--name", "fx-b", "--metastore", a.MetastoreURL(), "--expose", "1MiB")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(binDir, "ferry"), append([]string{"explain", "--config", cfgPath, "--metastore", a.MetastoreURL(), "--segment", "fx-b"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("ferry explain %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	out := run("--op", "write", "--size", "4KiB")
	for _, w := range []string{`policy "kv-local" matched`, "shm: taken"} {
		if !strings.Contains(out, w) {
			t.Errorf("ferry explain lacks %q:\n%s", w, out)
		}
	}
	out = run("--op", "read", "--size", "4KiB", "--transport", "tcp", "--intent", "foreground_get")
	for _, w := range []string{"hint: tcp", "tcp: taken (pinned by the request's transport hint)"} {
		if !strings.Contains(out, w) {
			t.Errorf("ferry explain --transport tcp lacks %q:\n%s", w, out)
		}
	}
	t.Logf("ferry explain --transport tcp:\n%s", out)
}

package host_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host"
)

// A plugin whose Probe answer is over the caps (a 1 MiB reason) is kept
// out with its reason, which names the answer and its size, and the
// engine runs on its other plugins: a transfer through tcp moves verified
// bytes.
func TestPluginOutOfBoundsLeavesEngineRunning(t *testing.T) {
	t.Setenv("FERRY_TEST_BLOAT", "reason")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := filepath.Join(t.TempDir(), "bounds.hcl")
	src := fmt.Sprintf("name = \"bounds-a\"\nplugin_dir = %q\nmetastore {\n  kind = \"none\"\n}\nplugin \"tcp\" {\n  config {\n    listen = [\"127.0.0.1:0\"]\n  }\n}\nplugin \"bloat\" {}\n", binDir)
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	a := engineFrom(t, p)
	var reason string
	for _, st := range a.Plugins(ctx) {
		switch st.Name {
		case "bloat":
			if st.State == "running" {
				t.Fatalf("the bloated plugin runs: %+v", st)
			}
			reason = st.Reason
		case "tcp":
			if st.State != "running" {
				t.Fatalf("tcp is %s: %s", st.State, st.Reason)
			}
		}
	}
	if !strings.Contains(reason, "probes out of bounds") || !strings.Contains(reason, "1048576 bytes") || len(reason) > 2048 {
		t.Fatalf("the bloated plugin's reason is %d bytes: %.300q; want it to say it probes out of bounds, and how large", len(reason), reason)
	}

	b := blobEngine(t, "bounds-b", "")
	lb, _ := b.Allocate(4096)
	rb, err := b.Register(ctx, lb, host.RemoteReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	seg, _, err := exchange(t, b, a)
	if err != nil {
		t.Fatal(err)
	}
	la, _ := a.Allocate(4096)
	if _, err := a.Register(ctx, la, host.LocalOnly); err != nil {
		t.Fatal(err)
	}
	copy(la, pattern(4096, 0, 7))
	if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: la, Segment: seg.ID, Remote: rb}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(lb, la) {
		t.Fatal("the peer's bytes differ from what was written")
	}
}

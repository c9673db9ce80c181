package example_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/loader"
)

// engine starts an engine from example.hcl, as an operator would: the
// plugin at the pinned path, with the pinned digest of the binary.
func engine(t *testing.T, name, metastore string) *host.Engine {
	t.Helper()
	src, err := os.ReadFile("example.hcl")
	if err != nil {
		t.Fatal(err)
	}
	sum, err := loader.FileSHA256(bin)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.NewReplacer(`"example-a"`, `"`+name+`"`, strings.Repeat("0", 64), sum).Replace(string(src))
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(bin, filepath.Join(dir, "bin", "ferry-plugin-example")); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(text), filepath.Join(dir, "example.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	if metastore != "" {
		cfg.Metastore = config.Metastore{Kind: config.MetastoreHTTP, URL: metastore}
	}
	e, err := host.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// TestTwoEngines loads the plugin from HCL with its sha256 pinned into
// two engines and moves verified bytes both ways between them.
func TestTwoEngines(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := engine(t, "example-b", "")
	a := engine(t, "example-a", b.MetastoreURL())
	target, err := b.Allocate(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Register(ctx, target, host.RemoteReadWrite); err != nil {
		t.Fatal(err)
	}
	local, err := a.Allocate(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Register(ctx, local, host.LocalOnly); err != nil {
		t.Fatal(err)
	}
	seg, err := a.OpenSegment(ctx, "example-b")
	if err != nil {
		t.Fatal(err)
	}
	rand.Read(local)
	if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: local, Segment: seg.ID, Remote: seg.Buffers[0].Base}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(target, local) {
		t.Fatal("write: the target holds other bytes")
	}
	rand.Read(target)
	if err := a.Transfer(ctx, host.Request{Op: host.Read, Local: local, Segment: seg.ID, Remote: seg.Buffers[0].Base}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(target, local) {
		t.Fatal("read: the initiator holds other bytes")
	}
}

package host_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/metastore/metastoretest"
	"github.com/ferrydev/ferry/host/segment"
)

// engineHCL writes a config for an engine named name with the given
// metastore block and one TCP plugin listening on listen.
func engineHCL(t *testing.T, name, metastoreBlock, listen string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name+".hcl")
	src := fmt.Sprintf("name = %q\nplugin_dir = %q\nmetastore {\n%s\n}\nplugin \"tcp\" {\n  config {\n    listen = [%q]\n  }\n}\n", name, binDir, metastoreBlock, listen)
	if err := os.WriteFile(p, []byte(withRunSecret(src)), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// metastoreBackends are the shared metastores the cluster tests run
// against: start serves a real redis-server or etcd for the test and
// returns the HCL metastore block for it, with a lease TTL of one second.
var metastoreBackends = []struct {
	name  string
	start func(t *testing.T) string
}{
	{"redis", func(t *testing.T) string {
		s := metastoretest.NewRedis(t)
		return fmt.Sprintf("kind = \"redis\"\naddress = %q\nttl = \"1s\"", s.Addr)
	}},
	{"etcd", func(t *testing.T) string {
		s := metastoretest.NewEtcd(t)
		return fmt.Sprintf("kind = \"etcd\"\nendpoints = [%q]\nttl = \"1s\"", s.EtcdEndpoint())
	}},
}

// engineFrom starts an engine on the config at path, closed when the test
// ends.
func engineFrom(t *testing.T, path string) *host.Engine {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	e, err := host.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// transferErr checks that err is one TransferError in state want that
// answers errors.Is(target) and mentions text.
func transferErr(t *testing.T, what string, err error, want host.State, target error, text string) {
	t.Helper()
	var te *host.TransferError
	if !errors.As(err, &te) || te.State != want || !errors.Is(err, target) || !strings.Contains(err.Error(), text) {
		t.Fatalf("%s: %v; want a TransferError %v, %v, mentioning %q", what, err, want, target, text)
	}
}

// TestClusterPeerKilledAndRestarted: through redis and etcd, a transfer to
// a SIGKILLed peer ends FAILED with a clear reason within seconds; the
// peer restarted under the same name (and TCP port) is never written
// through the handle of its previous life, and is reached under its new
// incarnation by opening the segment again.
func TestClusterPeerKilledAndRestarted(t *testing.T) {
	for _, be := range metastoreBackends {
		t.Run(be.name, func(t *testing.T) {
			ctx := context.Background()
			block := be.start(t)
			a := engineFrom(t, engineHCL(t, be.name+"-ka", block, "127.0.0.1:0"))
			// The same port across restarts, so that the old handle
			// reaches the new life of the peer, which must refuse it.
			bcfg := engineHCL(t, be.name+"-kb", block, fmt.Sprintf("127.0.0.1:%d", metastoretest.FreePort(t)))
			b := startPeer(t, "--config", bcfg, "--expose", "1MiB", "--pattern", "9")
			seg, err := a.OpenSegment(ctx, be.name+"-kb")
			if err != nil {
				t.Fatal(err)
			}
			local, _ := a.Allocate(1 << 20)
			if _, err := a.Register(ctx, local, host.LocalOnly); err != nil {
				t.Fatal(err)
			}
			remote := b.Ready.Buffers[0].Base
			src := local[:64<<10]
			rand.Read(src)
			write := host.Request{Op: host.Write, Local: src, Segment: seg.ID, Remote: remote}
			if err := a.Transfer(ctx, write); err != nil {
				t.Fatal(err)
			}

			b.kill()
			b.cmd.Wait()
			tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err = a.Transfer(tctx, write)
			expired := tctx.Err() != nil
			cancel()
			if expired {
				t.Fatalf("a transfer to the killed peer did not end within 5s: %v", err)
			}
			transferErr(t, "transfer to the killed peer", err, host.StateFailed, host.ErrTransportUnavailable, be.name+"-kb")
			t.Logf("killed peer: %v", err)

			b2 := startPeer(t, "--config", bcfg, "--expose", "1MiB", "--pattern", "9")
			if b2.Ready.Incarnation == b.Ready.Incarnation {
				t.Fatal("the restarted peer kept its incarnation")
			}
			before := b2.ask(t, "sha256 0 %d", 1<<20)
			// The metastore's watch shows the new life: the old handle
			// is retired before any transfer is tried, so the write is
			// refused before anything is sent (INVALID). Without a
			// watch the plugin's refusal and a re-read of the
			// descriptor find the same (FAILED): see
			// TestPeerToPeerPeerRestarted.
			waitSegment(t, a, seg.ID, "the peer's restart", func(retired string, _ bool, _ []segment.Buffer) bool { return retired != "" })
			tctx, cancel = context.WithTimeout(ctx, 5*time.Second)
			err = a.Transfer(tctx, write)
			cancel()
			transferErr(t, "write through the old handle", err, host.StateInvalid, host.ErrSegmentNotFound, "restarted")
			// The handle names the new life.
			if !strings.Contains(err.Error(), fmt.Sprintf("now incarnation %#x", b2.Ready.Incarnation)) {
				t.Fatalf("write through the old handle: %v; want it to name the new incarnation %#x", err, b2.Ready.Incarnation)
			}
			t.Logf("stale write: %v", err)
			if got := b2.ask(t, "sha256 0 %d", 1<<20); got != before {
				t.Fatal("a write addressed to the previous incarnation changed the restarted peer's memory")
			}

			// Opening the name again reaches the new life without a
			// CloseSegment; the old handle stays bound to the old one.
			seg2, err := a.OpenSegment(ctx, be.name+"-kb")
			if err != nil {
				t.Fatal(err)
			}
			if seg2.Incarnation != b2.Ready.Incarnation || seg2.ID == seg.ID {
				t.Fatalf("reopened %+v, want a new handle to incarnation %#x (old handle %d)", seg2, b2.Ready.Incarnation, seg.ID)
			}
			err = a.Transfer(ctx, write)
			transferErr(t, "write through the old handle after reopening", err, host.StateInvalid, host.ErrSegmentNotFound, "restarted")
			if got := b2.ask(t, "sha256 0 %d", 1<<20); got != before {
				t.Fatal("a write through the old handle changed the restarted peer's memory")
			}
			// The new life registered its memory elsewhere.
			remote = b2.Ready.Buffers[0].Base
			write.Segment, write.Remote = seg2.ID, remote
			if err := a.Transfer(ctx, write); err != nil {
				t.Fatal(err)
			}
			if got := b2.ask(t, "sha256 0 %d", len(src)); got != sum(src) {
				t.Fatal("the write through the new handle did not land in the restarted peer")
			}
			if err := a.CloseSegment(ctx, seg.ID); err != nil {
				t.Fatal(err)
			}
			if err := a.CloseSegment(ctx, seg2.ID); err != nil {
				t.Fatal(err)
			}
			seg3, err := a.OpenSegment(ctx, be.name+"-kb")
			if err != nil {
				t.Fatal(err)
			}
			read := host.Request{Op: host.Read, Local: local[:4096], Segment: seg3.ID, Remote: remote + 1<<19}
			if err := a.Transfer(ctx, read); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(local[:4096], pattern(4096, 1<<19, 9)) {
				t.Fatal("read after close and reopen differs from the restarted peer's pattern")
			}
		})
	}
}

// TestRedisOutage: with redis-server stopped, transfers between engines
// that already know each other go on, MetastoreHealth reports the outage,
// and once the server is back the health clears and the peer's descriptor
// is published again.
func TestRedisOutage(t *testing.T) {
	ctx := context.Background()
	srv := metastoretest.NewRedis(t)
	block := fmt.Sprintf("kind = \"redis\"\naddress = %q\nttl = \"1s\"", srv.Addr)
	a := engineFrom(t, engineHCL(t, "out-a", block, "127.0.0.1:0"))
	b := startPeer(t, "--config", engineHCL(t, "out-b", block, "127.0.0.1:0"), "--expose", "1MiB", "--pattern", "4")
	seg, err := a.OpenSegment(ctx, "out-b")
	if err != nil {
		t.Fatal(err)
	}
	local, _ := a.Allocate(1 << 20)
	if _, err := a.Register(ctx, local, host.LocalOnly); err != nil {
		t.Fatal(err)
	}
	if err := quick(a).MetastoreOK; err != "ok" {
		t.Fatalf("health before the outage: %s", err)
	}
	remote := b.Ready.Buffers[0].Base

	srv.Stop()
	waitFor(t, 10*time.Second, "MetastoreHealth to report the outage", func() bool { return quick(a).MetastoreOK != "ok" })
	if err := quick(a).MetastoreOK; !strings.Contains(err, srv.Addr) {
		t.Errorf("outage reported as %s, want it to name %s", err, srv.Addr)
	}
	for i, off := range []uint64{0, 4099, 1<<20 - 65536} {
		dst := local[:65536]
		clear(dst)
		if err := a.Transfer(ctx, host.Request{Op: host.Read, Local: dst, Segment: seg.ID, Remote: remote + off}); err != nil {
			t.Fatalf("read %d during the outage: %v", i, err)
		}
		if !bytes.Equal(dst, pattern(65536, off, 4)) {
			t.Fatalf("read %d during the outage: bytes differ from the peer's pattern", i)
		}
		rand.Read(dst)
		if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: dst, Segment: seg.ID, Remote: remote + off}); err != nil {
			t.Fatalf("write %d during the outage: %v", i, err)
		}
		if got := b.ask(t, "sha256 %d %d", off, len(dst)); got != sum(dst) {
			t.Fatalf("write %d during the outage: the peer has other bytes", i)
		}
		b.ask(t, "fill 4")
	}
	// Registering during the outage is not an error: the descriptor is
	// written when the metastore returns.
	more, _ := a.Allocate(4096)
	if _, err := a.Register(ctx, more, host.RemoteRead); err != nil {
		t.Fatalf("register during the outage: %v", err)
	}

	srv.Start(t) // same port, empty: the leases must write the descriptors again
	waitFor(t, 15*time.Second, "MetastoreHealth to clear", func() bool { return quick(a).MetastoreOK == "ok" })
	c := engineFrom(t, engineHCL(t, "out-c", block, "127.0.0.1:0"))
	var segB host.Segment
	waitFor(t, 15*time.Second, "the peer's descriptor to be back", func() bool {
		segB, err = c.OpenSegment(ctx, "out-b")
		return err == nil
	})
	if segB.Incarnation != b.Ready.Incarnation {
		t.Fatalf("descriptor back with incarnation %#x, the peer is %#x", segB.Incarnation, b.Ready.Incarnation)
	}
	segA, err := c.OpenSegment(ctx, "out-a")
	if err != nil {
		t.Fatal(err)
	}
	if len(segA.Buffers) != 2 {
		t.Fatalf("a's descriptor after the outage has %d buffers, want the one registered during it too", len(segA.Buffers))
	}
	cl, _ := c.Allocate(4096)
	c.Register(ctx, cl, host.LocalOnly)
	if err := c.Transfer(ctx, host.Request{Op: host.Read, Local: cl, Segment: segB.ID, Remote: remote + 8192}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(cl, pattern(4096, 8192, 4)) {
		t.Fatal("read through the re-published descriptor differs from the peer's pattern")
	}
}

// TestPeerToPeerAcrossProcesses: with no metastore on either side, an
// engine opens a `ferry run` peer by the control address its ready line
// prints, and moves verified bytes both ways.
func TestPeerToPeerAcrossProcesses(t *testing.T) {
	ctx := context.Background()
	block := "kind = \"none\""
	a := engineFrom(t, engineHCL(t, "p2p-a", block, "127.0.0.1:0"))
	b := startPeer(t, "--config", engineHCL(t, "p2p-b", block, "127.0.0.1:0"), "--expose", "1MiB", "--pattern", "6")
	if b.Ready.Control == "" {
		t.Fatal("the ready line has no control address")
	}
	seg, err := a.OpenSegment(ctx, b.Ready.Control)
	if err != nil {
		t.Fatal(err)
	}
	if seg.Name != "p2p-b" || seg.Incarnation != b.Ready.Incarnation {
		t.Fatalf("opened %+v, want p2p-b incarnation %#x", seg, b.Ready.Incarnation)
	}
	local, _ := a.Allocate(1 << 20)
	if _, err := a.Register(ctx, local, host.LocalOnly); err != nil {
		t.Fatal(err)
	}
	remote := b.Ready.Buffers[0].Base
	if err := a.Transfer(ctx, host.Request{Op: host.Read, Local: local[1 : 1+300001], Segment: seg.ID, Remote: remote + 7}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(local[1:1+300001], pattern(300001, 7, 6)) {
		t.Fatal("peer-to-peer read differs from the peer's pattern")
	}
	src := local[4096 : 4096+500000]
	rand.Read(src)
	if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: src, Segment: seg.ID, Remote: remote + 13}); err != nil {
		t.Fatal(err)
	}
	if got := b.ask(t, "sha256 13 %d", len(src)); got != sum(src) {
		t.Fatal("peer-to-peer write: the peer has other bytes")
	}
}

// TestPeerToPeerPeerRestarted: without a metastore nothing watches the
// peer, so a peer restarted on the same addresses is found out when a
// transfer to it fails: the write through the handle of its previous life
// ends FAILED, is never applied to the new life, and the engine re-reads
// the descriptor from the peer once to name the new incarnation.
func TestPeerToPeerPeerRestarted(t *testing.T) {
	ctx := context.Background()
	block := "kind = \"none\""
	a := engineFrom(t, engineHCL(t, "p2pr-a", block, "127.0.0.1:0"))
	bcfg := engineHCL(t, "p2pr-b", block, fmt.Sprintf("127.0.0.1:%d", metastoretest.FreePort(t)))
	control := fmt.Sprintf("127.0.0.1:%d", metastoretest.FreePort(t))
	f, err := os.OpenFile(bcfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "control {\n  listen = %q\n}\n", control)
	f.Close()
	b := startPeer(t, "--config", bcfg, "--expose", "1MiB", "--pattern", "5")
	seg, err := a.OpenSegment(ctx, control)
	if err != nil {
		t.Fatal(err)
	}
	local, _ := a.Allocate(1 << 20)
	if _, err := a.Register(ctx, local, host.LocalOnly); err != nil {
		t.Fatal(err)
	}
	src := local[:64<<10]
	rand.Read(src)
	write := host.Request{Op: host.Write, Local: src, Segment: seg.ID, Remote: b.Ready.Buffers[0].Base}
	if err := a.Transfer(ctx, write); err != nil {
		t.Fatal(err)
	}
	b.kill()
	b.cmd.Wait()
	b2 := startPeer(t, "--config", bcfg, "--expose", "1MiB", "--pattern", "5")
	before := b2.ask(t, "sha256 0 %d", 1<<20)
	if retired, _, _, _ := host.SegmentHandle(a, seg.ID); retired != "" {
		t.Fatalf("the handle was retired with no metastore to watch: %s", retired)
	}
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = a.Transfer(tctx, write)
	cancel()
	transferErr(t, "write through the old handle", err, host.StateFailed, host.ErrSegmentNotFound, "restarted")
	if !strings.Contains(err.Error(), fmt.Sprintf("now incarnation %#x", b2.Ready.Incarnation)) {
		t.Fatalf("write through the old handle: %v; want it to name the new incarnation %#x", err, b2.Ready.Incarnation)
	}
	if got := b2.ask(t, "sha256 0 %d", 1<<20); got != before {
		t.Fatal("a write addressed to the previous incarnation changed the restarted peer's memory")
	}
	err = a.Transfer(ctx, write)
	transferErr(t, "write through the old handle after the re-read", err, host.StateInvalid, host.ErrSegmentNotFound, "restarted")
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond) // polling observable state
	}
}

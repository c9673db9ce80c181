package host_test

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host"
)

// killSpan is what the kill -9 tests write: large enough that TCP is
// still moving it when the test sees its first bytes and kills the plugin.
const killSpan = 1 << 30

// killConfig is the initiator's HCL for the kill -9 tests: tcp, and shm
// unless onlyTCP, with a policy that puts tcp first for same-machine
// traffic (the default order would put shm first).
func killConfig(name string, onlyTCP bool) string {
	s := fmt.Sprintf(`name = %q
plugin_dir = %q
plugin "tcp" {
  config {
    listen = ["127.0.0.1:0"]
  }
}
`, name, binDir)
	if onlyTCP {
		return s
	}
	return s + `plugin "shm" {}
policy "tcp-first" {
  match {
    same_machine = true
  }
  transports = ["tcp", "shm"]
}
`
}

// killSetup starts the initiator engine from killConfig and a peer engine
// in a child process with the default plugins (tcp and shm) exposing
// killSpan bytes, and returns the open segment, the peer's buffer address
// and a registered local buffer of killSpan random bytes.
func killSetup(t *testing.T, ctx context.Context, name string, onlyTCP bool) (*host.Engine, *peer, host.Segment, uint64, []byte) {
	t.Helper()
	a := hclEngine(t, ctx, killConfig(name+"-a", onlyTCP), name+".hcl")
	b := startPeer(t, "--name", name+"-b", "--metastore", a.MetastoreURL(), "--expose", fmt.Sprint(killSpan))
	seg, err := a.OpenSegment(ctx, name+"-b")
	if err != nil {
		t.Fatal(err)
	}
	local := localBuffer(t, ctx, a, killSpan)
	fillRandom(local)
	return a, b, seg, b.Ready.Buffers[0].Base, local
}

// fillRandom XORs b with an AES-CTR keystream under a random key: new
// bytes that do not repeat within a transfer, at memory speed (crypto/rand
// and Go loops take tens of seconds per GiB under the race detector).
func fillRandom(b []byte) {
	var key, iv [16]byte
	rand.Read(key[:])
	blk, err := aes.NewCipher(key[:])
	if err != nil {
		panic(err)
	}
	cipher.NewCTR(blk, iv[:]).XORKeyStream(b, b)
}

// killWhenMoving waits until the named plugin of e has sent bytes (its
// bytes_sent counter moved), then kills its process with SIGKILL. It fails
// the test if done is closed first: the transfer ended before the plugin
// could be killed under it. It returns the killed pid.
func killWhenMoving(t *testing.T, e *host.Engine, name string, done <-chan struct{}) int {
	t.Helper()
	pid := host.PluginPID(e, name)
	if pid <= 0 {
		t.Fatalf("plugin %q has no process", name)
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			t.Fatalf("the transfer ended before plugin %q had sent a byte", name)
		case <-tick.C:
		}
		st := pluginStatus(e, name)
		if sent := st.Counters["bytes_sent"]; sent > 0 {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatalf("kill -9 %d (%s): %v", pid, name, err)
			}
			t.Logf("killed plugin %q (pid %d) with SIGKILL after %d bytes sent", name, pid, sent)
			return pid
		}
	}
}

// transferKillingTCP runs req on a and SIGKILLs a's tcp plugin once it
// has sent bytes of it; it returns the killed pid, how long the transfer
// took and its error.
func transferKillingTCP(t *testing.T, ctx context.Context, a *host.Engine, req host.Request) (pid int, took time.Duration, err error) {
	t.Helper()
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		err = a.Transfer(ctx, req)
	}()
	pid = killWhenMoving(t, a, "tcp", done)
	<-done
	return pid, time.Since(start), err
}

// waitPlugin polls e.Plugins until the named plugin runs with more than
// restartsAbove restarts, for up to bound.
func waitPlugin(e *host.Engine, name string, restartsAbove uint64, bound time.Duration) (host.PluginStatus, error) {
	deadline := time.Now().Add(bound)
	for {
		st := pluginStatus(e, name)
		if st.State == "running" && st.Restarts > restartsAbove {
			return st, nil
		}
		if time.Now().After(deadline) {
			return st, fmt.Errorf("plugin %q not running again within %v: %+v", name, bound, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// killSeen kills plugin name's process with SIGKILL and waits until the
// engine has seen it exit; it returns the plugin's restarts before.
func killSeen(t *testing.T, e *host.Engine, name string) (restarts uint64) {
	t.Helper()
	restarts = pluginStatus(e, name).Restarts
	pid := host.PluginPID(e, name)
	if pid <= 0 {
		t.Fatalf("the %s plugin has no process", name)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d (%s): %v", pid, name, err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		if st := pluginStatus(e, name); st.State != "running" || st.Restarts > restarts {
			return restarts
		}
		if time.Now().After(deadline) {
			t.Fatalf("the engine did not see %s's exit within 30s", name)
		}
	}
}

// waitBack is waitPlugin under a generous bound, failing the test.
func waitBack(t *testing.T, e *host.Engine, name string, restartsAbove uint64) host.PluginStatus {
	t.Helper()
	st, err := waitPlugin(e, name, restartsAbove, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// pinnedWriteAfterRestart writes a few MiB pinned to tcp at an odd offset
// and checks them on the peer: the restarted plugin carries traffic.
func pinnedWriteAfterRestart(t *testing.T, ctx context.Context, a *host.Engine, b *peer, seg host.Segment, remote uint64, local []byte) {
	t.Helper()
	const off, n = 4099, 4<<20 + 3
	before := pluginStatus(a, "tcp").Counters["bytes_sent"]
	src := local[off : off+n]
	fillRandom(src)
	if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: src, Segment: seg.ID, Remote: remote + off, Transport: "tcp"}); err != nil {
		t.Fatalf("write pinned to tcp after its restart: %v", err)
	}
	if got, want := b.ask(t, "sha256 %d %d", off, n), sum(src); got != want {
		t.Fatalf("write pinned to tcp after its restart: peer has sha256 %s, sent %s", got, want)
	}
	if after := pluginStatus(a, "tcp").Counters["bytes_sent"]; after < before+n {
		t.Fatalf("restarted tcp plugin sent %d bytes for a %d-byte write", after-before, n)
	}
}

// TestKillTCPPluginFailsOverToSHM kills the initiator's TCP plugin with
// SIGKILL in the middle of a 1 GiB write whose policy puts tcp first and
// shm second: the write completes (over shm) with every byte verified by
// the peer, tcp is restarted, and a write pinned to tcp then goes through
// the new process.
func TestKillTCPPluginFailsOverToSHM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a, b, seg, remote, local := killSetup(t, ctx, "k9shm", false)
	if !strings.Contains(strings.Join(seg.Transports, ","), "shm") || !strings.Contains(strings.Join(seg.Transports, ","), "tcp") {
		t.Fatalf("segment offers %v, want tcp and shm", seg.Transports)
	}
	req := host.Request{Op: host.Write, Local: local, Segment: seg.ID, Remote: remote}
	if text, err := a.Explain(req); err != nil || !strings.Contains(text, "tcp") {
		t.Fatalf("explain: %v\n%s", err, text)
	}
	shmBefore := pluginStatus(a, "shm").Counters["bytes_written"]

	pid, took, err := transferKillingTCP(t, ctx, a, req)
	if ctx.Err() != nil {
		t.Fatalf("transfer ran into the test's bound: %v", err)
	}
	if err != nil {
		t.Fatalf("1 GiB write with tcp killed under it: %v", err)
	}
	t.Logf("1 GiB write with a kill -9 and failover took %v", took)
	b.holds(t, "the write", local)
	if moved := pluginStatus(a, "shm").Counters["bytes_written"] - shmBefore; moved < killSpan {
		t.Fatalf("shm wrote %d bytes; the failed-over write needs all %d", moved, killSpan)
	}

	st := waitBack(t, a, "tcp", 0)
	if st.Restarts < 1 {
		t.Fatalf("tcp restarts = %d, want >= 1", st.Restarts)
	}
	if now := host.PluginPID(a, "tcp"); now == pid || now <= 0 {
		t.Fatalf("tcp pid after restart = %d, killed %d", now, pid)
	}
	pinnedWriteAfterRestart(t, ctx, a, b, seg, remote, local)
}

// TestKillOnlyTCPPlugin kills the initiator's only transport with SIGKILL
// in the middle of a 1 GiB write. The write either completes on the
// restarted plugin, with every byte verified, or ends FAILED with an
// error that names the plugin and says it exited; it never hangs.
func TestKillOnlyTCPPlugin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a, b, seg, remote, local := killSetup(t, ctx, "k9only", true)
	if len(a.Status(ctx).Plugins) != 1 {
		t.Fatalf("initiator runs %d plugins, want tcp alone", len(a.Status(ctx).Plugins))
	}
	req := host.Request{Op: host.Write, Local: local, Segment: seg.ID, Remote: remote}

	_, took, err := transferKillingTCP(t, ctx, a, req)
	if ctx.Err() != nil {
		t.Fatalf("transfer ran into the test's bound (it hung): %v", err)
	}
	t.Logf("transfer ended after %v: %v", took, err)
	if err == nil {
		b.holds(t, "transfer returned nil", local)
	} else {
		var te *host.TransferError
		switch {
		case !errors.As(err, &te):
			t.Fatalf("want a TransferError, got %v", err)
		case te.State != host.StateFailed || !errors.Is(err, host.ErrPluginFailed):
			t.Fatalf("want a FAILED task with ErrPluginFailed, got state %v: %v", te.State, err)
		case te.Transport != "tcp" || !strings.Contains(err.Error(), `plugin "tcp"`) || !strings.Contains(err.Error(), "exited"):
			t.Fatalf("the error does not name the plugin and the reason: %v", err)
		}
	}
	st := waitBack(t, a, "tcp", 0)
	t.Logf("tcp back: restarts %d", st.Restarts)
	pinnedWriteAfterRestart(t, ctx, a, b, seg, remote, local)
}

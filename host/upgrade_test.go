package host_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
)

// tcpOnly leaves tcp the only plugin of a default config, so that two
// engines on one machine talk over it (not shm).
func tcpOnly(c *config.Config) {
	for i := range c.Plugins {
		c.Plugins[i].Enabled = c.Plugins[i].Name == "tcp"
	}
}

// copyPlugin copies the built plugin binary name into a directory of the
// test's: a new binary at a new path, with its sha256.
func copyPlugin(t *testing.T, name string) (path, sum string) {
	t.Helper()
	src, err := os.Open(filepath.Join(binDir, "ferry-plugin-"+name))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	path = filepath.Join(t.TempDir(), "ferry-plugin-"+name+"-v2")
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(dst, h), src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return path, hex.EncodeToString(h.Sum(nil))
}

// verifiedStream runs workers goroutines, each writing fresh bytes from a
// to its own region of b's buffer over tcp, checking them in b's memory,
// and reading them back into a, checking them again, until stop is
// closed. rounds counts the rounds that passed, failed the transfers
// that did not; each round past every multiple of step is announced on
// tick.
type verifiedStream struct {
	rounds, failed atomic.Int64
	mu             sync.Mutex
	errs           []error
	wg             sync.WaitGroup
	stop           chan struct{}
	progress       chan struct{}
}

func streamVerified(t *testing.T, ctx context.Context, a, b *host.Engine, workers, size int) *verifiedStream {
	return streamVerifiedOpen(t, ctx, a, b, workers, size, func() host.Segment { return openByControl(t, a, b) })
}

// streamVerifiedOpen is streamVerified with a's handle of b from open
// (called after b's buffer is registered: its descriptor lists it).
func streamVerifiedOpen(t *testing.T, ctx context.Context, a, b *host.Engine, workers, size int, open func() host.Segment) *verifiedStream {
	t.Helper()
	s := &verifiedStream{stop: make(chan struct{}), progress: make(chan struct{}, 1)}
	la := localBuffer(t, ctx, a, workers*size)
	back := localBuffer(t, ctx, a, workers*size)
	lb, rb := remoteBuffer(t, ctx, b, workers*size)
	seg := open()
	for w := range workers {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			off := w * size
			src, dst, got := la[off:off+size], lb[off:off+size], back[off:off+size]
			for round := uint64(0); ; round++ {
				select {
				case <-s.stop:
					return
				default:
				}
				copy(src, pattern(size, uint64(off), round*uint64(workers)+uint64(w)+1))
				err := a.Transfer(ctx, host.Request{Op: host.Write, Local: src, Segment: seg.ID, Remote: rb + uint64(off)})
				if err == nil && !bytes.Equal(dst, src) {
					err = fmt.Errorf("worker %d round %d: the bytes written differ at the target", w, round)
				}
				if err == nil {
					clear(got)
					err = a.Transfer(ctx, host.Request{Op: host.Read, Local: got, Segment: seg.ID, Remote: rb + uint64(off)})
				}
				if err == nil && !bytes.Equal(got, src) {
					err = fmt.Errorf("worker %d round %d: the bytes read back differ", w, round)
				}
				if err != nil {
					s.failed.Add(1)
					s.mu.Lock()
					if len(s.errs) < 10 {
						s.errs = append(s.errs, err)
					}
					s.mu.Unlock()
					continue
				}
				s.rounds.Add(1)
				select {
				case s.progress <- struct{}{}:
				default:
				}
			}
		}()
	}
	t.Cleanup(s.end)
	return s
}

// after waits until n more rounds passed than had at the call.
func (s *verifiedStream) after(t *testing.T, n int64) {
	t.Helper()
	want := s.rounds.Load() + n
	timeout := time.After(time.Minute)
	for s.rounds.Load() < want {
		select {
		case <-s.progress:
		case <-timeout:
			s.mu.Lock()
			first := s.errs
			s.mu.Unlock()
			if len(first) > 0 {
				first = first[:1]
			}
			t.Fatalf("the stream made %d rounds of the %d awaited in a minute (%d failed: %v)", s.rounds.Load(), want, s.failed.Load(), first)
		}
	}
}

func (s *verifiedStream) end() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.wg.Wait()
}

// check stops the stream and fails the test for any failed transfer.
func (s *verifiedStream) check(t *testing.T) {
	t.Helper()
	s.end()
	if n := s.failed.Load(); n != 0 {
		t.Fatalf("%d transfers failed across the upgrade (of %d verified rounds): %v", n, s.rounds.Load(), errors.Join(s.errs...))
	}
	t.Logf("%d verified write+read rounds, none failed", s.rounds.Load())
}

// gone reports whether process pid no longer exists.
func gone(pid int) bool { return syscall.Kill(pid, 0) == syscall.ESRCH }

// TestUpgradeTCPUnderLoad upgrades the initiator's tcp twice, to copies
// of its binary at other paths (pinned by sha256), while a stream of
// verified writes and reads runs to another engine: no transfer fails,
// every byte is verified across the switches, each old process exits,
// and status shows the new binary and the upgrade done. (The target's
// side: TestUpgradeTargetTCPUnderLoad, with a peer that follows the
// metastore; one that does not learns the new endpoint only from a
// failure, see ARCHITECTURE.md.)
func TestUpgradeTCPUnderLoad(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a, b := loopEngine(t, "up-a", tcpOnly), loopEngine(t, "up-b", tcpOnly)
	s := streamVerified(t, ctx, a, b, 4, 2<<20)
	s.after(t, 8)
	for n := range 2 {
		e := a
		path, sum := copyPlugin(t, "tcp")
		old := pluginStatus(e, "tcp")
		if err := e.UpgradePlugin(ctx, host.PluginUpgrade{Name: "tcp", Path: path, SHA256: sum}); err != nil {
			t.Fatalf("upgrade of %s's tcp: %v", e.Name(), err)
		}
		st := pluginStatus(e, "tcp")
		u := st.Upgrade
		if u == nil || u.State != "done" || st.Path != path || st.SHA256 != sum || st.State != "running" || st.PID == old.PID || st.Upgrades != uint64(n+1) {
			t.Fatalf("%s's tcp after the upgrade: %+v, upgrade %+v", e.Name(), st, u)
		}
		if u.From != old.Path || u.To != path || u.OldPID != old.PID || u.NewPID != st.PID {
			t.Fatalf("%s's upgrade status %+v; old %s pid %d", e.Name(), u, old.Path, old.PID)
		}
		if !gone(old.PID) {
			t.Fatalf("%s's old tcp process %d still exists after the upgrade", e.Name(), old.PID)
		}
		t.Logf("%s: tcp upgraded from pid %d to %d (drain %q, held %d)", e.Name(), old.PID, st.PID, u.Drain, u.Held)
		s.after(t, 8) // transfers go on through the new binary
	}
	s.check(t)
}

// TestUpgradeTargetTCPUnderLoad upgrades the tcp of the engine that
// receives a stream of verified writes and reads. Its peer follows the
// metastore: it reads the descriptor the upgrade republished and moves
// to the new run, while the old run serves it until then (it lingers
// until its counters go still). No transfer fails, every byte is
// verified, and the old process exits.
func TestUpgradeTargetTCPUnderLoad(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfgA := config.Default("upt-a")
	cfgA.PluginDir = binDir
	tcpOnly(cfgA)
	a, err := host.New(ctx, cfgA)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	cfgB := joinConfig("upt-b", a.MetastoreURL())
	tcpOnly(cfgB)
	b, err := host.New(ctx, cfgB)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s := streamVerifiedOpen(t, ctx, a, b, 4, 2<<20, func() host.Segment {
		seg, err := a.OpenSegment(ctx, "upt-b")
		if err != nil {
			t.Fatal(err)
		}
		return seg
	})
	s.after(t, 8)
	path, sum := copyPlugin(t, "tcp")
	old := pluginStatus(b, "tcp")
	if err := b.UpgradePlugin(ctx, host.PluginUpgrade{Name: "tcp", Path: path, SHA256: sum}); err != nil {
		t.Fatalf("upgrade of the target's tcp: %v", err)
	}
	if st := pluginStatus(b, "tcp"); st.Upgrade == nil || st.Upgrade.State != "done" || st.PID == old.PID || !gone(old.PID) {
		t.Fatalf("the target's tcp after the upgrade: %+v, upgrade %+v", st, st.Upgrade)
	}
	s.after(t, 8) // transfers go on to the new run
	s.check(t)
}

// TestUpgradeTargetPeerToPeer upgrades the target's shm under verified
// traffic between two engines with no metastore: nothing tells the
// initiator that the target's shm moved to a new socket, and the old run
// serves it until the drain bound, then stops. The transfers that fail
// there are failed over: the initiator reads the target's descriptor
// again from its control service (a chase), re-opens shm at the new
// endpoint and retries them. None fails, and the traffic goes on.
func TestUpgradeTargetPeerToPeer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	shmOnly := func(c *config.Config) {
		for i := range c.Plugins {
			c.Plugins[i].Enabled = c.Plugins[i].Name == "shm"
		}
	}
	a, b := loopEngine(t, "upp-a", shmOnly), loopEngine(t, "upp-b", shmOnly)
	s := streamVerified(t, ctx, a, b, 2, 1<<20)
	s.after(t, 8)
	path, sum := copyPlugin(t, "shm")
	old := pluginStatus(b, "shm")
	if err := b.UpgradePlugin(ctx, host.PluginUpgrade{Name: "shm", Path: path, SHA256: sum, Drain: time.Second}); err != nil {
		t.Fatalf("upgrade of the target's shm: %v", err)
	}
	if st := pluginStatus(b, "shm"); st.Upgrade == nil || st.Upgrade.State != "done" || st.PID == old.PID || !gone(old.PID) {
		t.Fatalf("the target's shm after the upgrade: %+v, upgrade %+v", st, st.Upgrade)
	}
	s.after(t, 16) // past the old run's stop: on to the new one
	s.check(t)
}

// TestUpgradeBrokenBinaryKeepsOld asks for upgrades to binaries that
// cannot serve: a wrong sha256, a shell script that exits, a path with
// nothing there. Each fails with the reason, in the error and in status;
// the old process still serves (same pid, transfers verified), and a
// good upgrade after them works.
func TestUpgradeBrokenBinaryKeepsOld(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, b := loopEngine(t, "upx-a", tcpOnly), loopEngine(t, "upx-b", tcpOnly)
	s := streamVerified(t, ctx, a, b, 2, 1<<20)
	s.after(t, 4)
	good, sum := copyPlugin(t, "tcp")
	script := filepath.Join(t.TempDir(), "ferry-plugin-tcp-broken")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho broken >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	old := pluginStatus(a, "tcp")
	cases := []struct {
		name string
		up   host.PluginUpgrade
	}{
		{"wrong sha256", host.PluginUpgrade{Name: "tcp", Path: good, SHA256: "00" + sum[2:]}},
		{"exits at start", host.PluginUpgrade{Name: "tcp", Path: script}},
		{"missing", host.PluginUpgrade{Name: "tcp", Path: filepath.Join(t.TempDir(), "nothing")}},
	}
	for i, c := range cases {
		err := a.UpgradePlugin(ctx, c.up)
		if !errors.Is(err, host.ErrPluginFailed) {
			t.Fatalf("%s: upgrade returned %v, want ErrPluginFailed", c.name, err)
		}
		st := pluginStatus(a, "tcp")
		u := st.Upgrade
		if st.State != "running" || st.PID != old.PID || st.Path != old.Path || u == nil || u.State != "failed" || u.Reason == "" ||
			st.UpgradesFailed != uint64(i+1) || st.Upgrades != 0 {
			t.Fatalf("%s: status after the failed upgrade: %+v, upgrade %+v", c.name, st, u)
		}
		t.Logf("%s: %v", c.name, err)
		s.after(t, 2) // the old binary serves on
	}
	if err := a.UpgradePlugin(ctx, host.PluginUpgrade{Name: "nosuch"}); !errors.Is(err, host.ErrInvalid) {
		t.Fatalf("upgrade of a plugin not configured: %v, want ErrInvalid", err)
	}
	if err := a.UpgradePlugin(ctx, host.PluginUpgrade{Name: "tcp", Path: good, SHA256: sum}); err != nil {
		t.Fatalf("a good upgrade after the failed ones: %v", err)
	}
	s.after(t, 2)
	s.check(t)
}

// holdConfig is an engine's HCL with no metastore: the fault plugin
// wrapping tcp, holding every descriptor hold before it carries it (none
// when hold is ""), so that an upgrade finds work in the old run.
func holdConfig(name, hold string) string {
	faults := ""
	if hold != "" {
		faults = fmt.Sprintf("fault \"hold\" {\n      delay = %q\n    }", hold)
	}
	return faultConfig(name, faults) + "metastore {\n  kind = \"none\"\n}\n"
}

// TestUpgradeWithWorkInFlight upgrades the initiator's plugin while
// every descriptor it was given is held in it (the fault plugin's hold:
// each waits before tcp carries it), so that the old run holds work when
// the upgrade commits. Within the drain bound the old run finishes it
// (drain "waited", nothing held when it stopped); with a bound too short
// for that, what it still holds fails over to the new run ("bound",
// held > 0). Either way every task COMPLETES and every byte is verified
// at the target.
func TestUpgradeWithWorkInFlight(t *testing.T) {
	const (
		reqs = 4
		size = 4 << 20 // four slices each
		hold = 2 * time.Second
	)
	for _, tc := range []struct {
		name  string
		drain time.Duration // PluginUpgrade.Drain
		conf  string        // HCL added to the initiator's
		want  string        // UpgradeStatus.Drain
	}{
		{"drained", 30 * time.Second, "", "waited"},
		// The bound from the config's supervise block, the call giving none.
		{"bound", 0, "supervise {\n  upgrade_drain = \"200ms\"\n}\n", "bound"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			a := hclEngine(t, ctx, holdConfig("upf-a", hold.String())+tc.conf, "upf-a.hcl")
			b := hclEngine(t, ctx, holdConfig("upf-b", ""), "upf-b.hcl")
			local := localBuffer(t, ctx, a, reqs*size)
			mem, base := remoteBuffer(t, ctx, b, reqs*size)
			seg := openByControl(t, a, b)
			copy(local, pattern(reqs*size, 0, 29))
			id, err := a.AllocateBatch(reqs)
			if err != nil {
				t.Fatal(err)
			}
			defer a.FreeBatch(id)
			var rs []host.Request
			for i := range reqs {
				off := i * size
				rs = append(rs, host.Request{Op: host.Write, Local: local[off : off+size], Segment: seg.ID, Remote: base + uint64(off),
					Transport: "fault", Deadline: time.Now().Add(time.Minute)})
			}
			old := pluginStatus(a, "fault")
			if err := a.Submit(id, rs...); err != nil {
				t.Fatal(err)
			}
			path, sum := copyPlugin(t, "fault")
			upgraded := make(chan error, 1)
			go func() {
				upgraded <- a.UpgradePlugin(ctx, host.PluginUpgrade{Name: "fault", Path: path, SHA256: sum, Drain: tc.drain})
			}()
			// The switch: the new run serves, the old one holds the
			// batch's descriptors, none of which has completed.
			var at host.PluginStatus
			for deadline := time.Now().Add(hold); ; {
				at = pluginStatus(a, "fault")
				if u := at.Upgrade; u != nil && u.State != "starting" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the upgrade did not commit within the hold (%v): %+v", hold, at.Upgrade)
				}
				time.Sleep(time.Millisecond)
			}
			states := make([]host.TaskStatus, reqs)
			if _, err := a.TaskStatusList(id, 0, states); err != nil {
				t.Fatal(err)
			}
			if at.Upgrade.State != "draining" || at.Draining == 0 || states[0].State != host.StatePending {
				t.Fatalf("at the switch: upgrade %+v, the old run holds %d descriptors, task 0 %v; want draining, held work, PENDING",
					at.Upgrade, at.Draining, states[0].State)
			}
			t.Logf("at the switch the old run (pid %d) held %d descriptors", old.PID, at.Draining)
			if err := <-upgraded; err != nil {
				t.Fatalf("upgrade: %v", err)
			}
			if err := a.Wait(ctx, id); err != nil {
				t.Fatalf("wait: %v", err)
			}
			if _, err := a.TaskStatusList(id, 0, states); err != nil {
				t.Fatal(err)
			}
			for i, st := range states {
				if st.State != host.StateCompleted {
					t.Errorf("task %d ended %v (%v) across the upgrade", i, st.State, st.Err)
				}
			}
			if !bytes.Equal(mem, local) {
				t.Fatalf("the target's bytes differ from those written across the upgrade")
			}
			st := pluginStatus(a, "fault")
			u := st.Upgrade
			if u == nil || u.State != "done" || u.Drain != tc.want || (u.Held > 0) != (tc.want == "bound") || st.PID == old.PID || !gone(old.PID) {
				t.Fatalf("after the upgrade: %+v, upgrade %+v; want done, drain %q", st, u, tc.want)
			}
			// Receiver credit: what the old run's slices took is back,
			// whether they completed there or were failed over when it
			// was killed holding them.
			for _, c := range a.Status(ctx).Credit {
				if c.InUse != 0 || c.InFlight != 0 {
					t.Errorf("credit at %s after the upgrade: %d bytes, %d requests in use; want none, every task ended", c.Segment, c.InUse, c.InFlight)
				}
			}
			t.Logf("upgrade %s: drain %q, held %d at the stop, %v; %d tasks COMPLETED, %d bytes verified",
				tc.name, u.Drain, u.Held, u.Done.Sub(u.Started).Round(time.Millisecond), reqs, len(mem))
		})
	}
}

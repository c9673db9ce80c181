package host_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
)

// crashAfter is how many descriptors the crashing fault plugin lets
// through: with 1 MiB slices, a 128 MiB transfer crashes it mid-way.
const crashAfter = 20

// faultConfig is the HCL of an engine whose first transport is the fault
// plugin with the given fault blocks, wrapping TCP on one loopback rail.
func faultConfig(name, faults string) string {
	return fmt.Sprintf(`name = %q
plugin_dir = %q
plugin "fault" {
  config {
    %s
    tcp {
      listen = ["127.0.0.1:0"]
    }
  }
}
`, name, binDir, faults)
}

// failoverConfig is an engine's HCL: the fault plugin (crashing after
// crashAfter descriptors when crash is set) wrapping TCP, then plain TCP
// unless onlyFault; a policy prefers fault.
func failoverConfig(name string, crash, onlyFault bool) string {
	faults := ""
	if crash {
		faults = fmt.Sprintf("fault \"crash\" {\n      after = %d\n    }\n", crashAfter)
	}
	s := faultConfig(name, faults)
	transports := `["fault"]`
	if !onlyFault {
		s += `plugin "tcp" {
  config {
    listen = ["127.0.0.1:0"]
  }
}
`
		transports = `["fault", "tcp"]`
	}
	return s + fmt.Sprintf("policy \"prefer-fault\" {\n  transports = %s\n}\n", transports)
}

// failoverPair starts the initiator name (failoverConfig; onlyFault: no
// tcp to fail over to) and the peer engine peerName exposing span bytes,
// and opens the peer's segment.
func failoverPair(t *testing.T, ctx context.Context, name, peerName string, onlyFault bool, span int) (*host.Engine, *peer, host.Segment) {
	t.Helper()
	a := hclEngine(t, context.Background(), failoverConfig(name, true, onlyFault), name+".hcl")
	b, seg := failoverSegment(t, ctx, a, peerName, span)
	return a, b, seg
}

// failoverPeer starts a peer engine offering both fault (with no faults)
// and tcp.
func failoverPeer(t *testing.T, a *host.Engine, name string, span int) *peer {
	t.Helper()
	file := filepath.Join(t.TempDir(), "peer.hcl")
	if err := os.WriteFile(file, []byte(withRunSecret(failoverConfig(name, false, false))), 0o600); err != nil {
		t.Fatal(err)
	}
	return startPeer(t, "--config", file, "--name", name, "--metastore", a.MetastoreURL(), "--expose", fmt.Sprint(span))
}

// holds fails the test unless the peer's first len(sent) bytes are sent
// (by sha256); what names the write checked.
func (p *peer) holds(t *testing.T, what string, sent []byte) {
	t.Helper()
	if got, want := p.ask(t, "sha256 0 %d", len(sent)), sum(sent); got != want {
		t.Fatalf("%s: peer has sha256 %s, sent %s", what, got, want)
	}
}

// failoverSegment starts the peer engine name (failoverPeer) and opens
// its segment from a.
func failoverSegment(t *testing.T, ctx context.Context, a *host.Engine, name string, span int) (*peer, host.Segment) {
	t.Helper()
	b := failoverPeer(t, a, name, span)
	seg, err := a.OpenSegment(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return b, seg
}

func pluginStatus(e *host.Engine, name string) host.PluginStatus {
	for _, st := range e.Status(context.Background()).Plugins {
		if st.Name == name {
			return st
		}
	}
	return host.PluginStatus{}
}

// waitRunning waits until the named plugin runs again after a restart.
func waitRunning(t *testing.T, e *host.Engine, name string) host.PluginStatus {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := pluginStatus(e, name)
		if st.State == "running" && st.Restarts >= 1 {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("plugin %q not back within 10s: %+v", name, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestFailoverOnPluginCrash crashes the preferred transport's plugin in
// the middle of a 128 MiB write: the write completes over tcp with every
// byte verified by the peer, the plugin is restarted, and a later
// transfer goes through it again.
func TestFailoverOnPluginCrash(t *testing.T) {
	const span = 128 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, b, seg := failoverPair(t, ctx, "fo-a", "fo-b", false, span)
	if len(seg.Transports) != 2 {
		t.Fatalf("segment offers %v, want fault and tcp", seg.Transports)
	}
	remote := b.Ready.Buffers[0].Base
	local := randomLocal(t, ctx, a, span)
	start := time.Now()
	if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: local, Segment: seg.ID, Remote: remote}); err != nil {
		t.Fatalf("write through a crashing plugin: %v", err)
	}
	t.Logf("128 MiB write with a crash and failover took %v", time.Since(start))
	b.holds(t, "the write", local)
	st := waitRunning(t, a, "fault")
	t.Logf("fault plugin back: %+v", st)
	before := st.Counters["descriptors"]

	// A small transfer fits under the crash threshold of the new run and
	// goes through the restarted plugin, as the policy prefers it.
	small := local[:64<<10]
	rand.Read(small)
	if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: small, Segment: seg.ID, Remote: remote}); err != nil {
		t.Fatalf("write after restart: %v", err)
	}
	b.holds(t, "after restart", small)
	after := pluginStatus(a, "fault")
	if after.Counters["descriptors"] <= before {
		t.Fatalf("restarted fault plugin carried nothing: descriptors %d -> %d (%+v)", before, after.Counters["descriptors"], after)
	}
}

// TestCrashWithoutFailoverTarget crashes the only transport: the transfer
// ends, FAILED with the plugin's failure or completed after restarts,
// and never hangs.
func TestCrashWithoutFailoverTarget(t *testing.T) {
	const span = 128 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	a, b, seg := failoverPair(t, ctx, "fo-c", "fo-d", true, span)
	remote := b.Ready.Buffers[0].Base
	local := randomLocal(t, ctx, a, span)
	err := a.Transfer(ctx, host.Request{Op: host.Write, Local: local, Segment: seg.ID, Remote: remote})
	if ctx.Err() != nil {
		t.Fatalf("transfer ran into the test's bound: %v", err)
	}
	switch {
	case err == nil:
		b.holds(t, "the write", local)
	case errors.Is(err, host.ErrPluginFailed):
		var te *host.TransferError
		if !errors.As(err, &te) || te.State != host.StateFailed {
			t.Fatalf("want a FAILED task, got %v", err)
		}
		t.Logf("ended FAILED as expected: %v", err)
	default:
		t.Fatalf("want nil or ErrPluginFailed, got %v", err)
	}
	waitRunning(t, a, "fault")
}

// TestBatchAPIFailsOver: failover is the engine's, not Transfer's. Tasks
// submitted through the batch API whose plugin crashes under them complete
// over the next transport, in a second attempt, with every byte verified;
// each task reaches one terminal state.
func TestBatchAPIFailsOver(t *testing.T) {
	const span, tasks = 64 << 20, 8
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, b, seg := failoverPair(t, ctx, "fo-e", "fo-f", false, span)
	remote := b.Ready.Buffers[0].Base
	local := randomLocal(t, ctx, a, span)
	id, err := a.AllocateBatch(tasks)
	if err != nil {
		t.Fatal(err)
	}
	defer a.FreeBatch(id)
	const part = span / tasks
	var reqs []host.Request
	for k := range tasks {
		reqs = append(reqs, host.Request{Op: host.Write, Local: local[k*part : (k+1)*part], Segment: seg.ID, Remote: remote + uint64(k*part)})
	}
	if err := a.Submit(id, reqs...); err != nil {
		t.Fatal(err)
	}
	failedOver := failedOverTasks(t, ctx, a, id, tasks, part)
	if failedOver == 0 {
		t.Fatalf("no task needed a second attempt: the fault plugin did not crash under them")
	}
	b.holds(t, "the write", local)
	bs, _ := a.BatchStatus(id)
	if bs.Completed != tasks || bs.Pending != 0 || bs.Failed != 0 {
		t.Fatalf("batch status %+v, want %d completed", bs, tasks)
	}
	t.Logf("%d of %d tasks failed over", failedOver, tasks)
}

// failedOverTasks waits for batch id, checks that each of its tasks
// completed with part bytes, and returns how many took a second attempt.
func failedOverTasks(t *testing.T, ctx context.Context, a *host.Engine, id host.BatchID, tasks, part int) int {
	t.Helper()
	if err := a.Wait(ctx, id); err != nil {
		t.Fatal(err)
	}
	failedOver := 0
	for k := range tasks {
		st, err := a.TaskStatus(id, k)
		if err != nil || st.State != host.StateCompleted || st.Bytes != uint64(part) {
			t.Fatalf("task %d: %+v, %v; want COMPLETED with %d bytes", k, st, err, part)
		}
		if st.Attempts > 1 {
			failedOver++
		}
	}
	return failedOver
}

// hclEngine starts an engine from HCL source (file names it in errors) and
// closes it when the test ends.
func hclEngine(t *testing.T, ctx context.Context, src, file string, opts ...host.Option) *host.Engine {
	t.Helper()
	cfg, err := config.Parse([]byte(src), file)
	if err != nil {
		t.Fatal(err)
	}
	shareSecret(t, cfg)
	e, err := host.New(ctx, cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// withRunSecret is an engine's HCL with the run's cluster secret file
// (shareSecret) unless it names a secret: for the files `ferry run
// --config` peers start from.
func withRunSecret(src string) string {
	if strings.Contains(src, "cluster_secret") {
		return src
	}
	return fmt.Sprintf("cluster_secret_file = %q\n", os.Getenv(config.SecretFileEnv)) + src
}

// shareSecret gives an engine from a file without a cluster secret the
// one every other engine of the run has (config.Default's, through
// $FERRY_CLUSTER_SECRET_FILE, which plugintest.Main sets), as a cluster
// does: its `ferry run` peers have it.
func shareSecret(t *testing.T, cfg *config.Config) {
	t.Helper()
	if s, err := host.ClusterSecret(cfg); err != nil || s != nil {
		return // its own secret, or an error host.New reports
	}
	cfg.ClusterSecretFile = os.Getenv(config.SecretFileEnv)
}

// envSecret is the cluster secret of the run (shareSecret).
func envSecret(t *testing.T) []byte {
	t.Helper()
	s, err := host.ClusterSecret(&config.Config{ClusterSecretFile: os.Getenv(config.SecretFileEnv)})
	if err != nil || s == nil {
		t.Fatalf("the run's cluster secret ($%s): %v", config.SecretFileEnv, err)
	}
	return s
}

// randomLocal allocates n bytes of a's memory, registers them local-only
// and fills them with random bytes: the source of a verified write.
func randomLocal(t *testing.T, ctx context.Context, a *host.Engine, n int) []byte {
	t.Helper()
	local := localBuffer(t, ctx, a, n)
	rand.Read(local)
	return local
}

// localBuffer allocates n bytes of a's memory and registers them
// local-only, for the local side of transfers.
func localBuffer(t *testing.T, ctx context.Context, a *host.Engine, n int) []byte {
	t.Helper()
	local, err := a.Allocate(n)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Register(ctx, local, host.LocalOnly); err != nil {
		t.Fatal(err)
	}
	return local
}

// remoteBuffer allocates n bytes of b's memory and registers them for
// remote reads and writes, for the far side of transfers; it returns them
// and their base.
func remoteBuffer(t *testing.T, ctx context.Context, b *host.Engine, n int) ([]byte, uint64) {
	t.Helper()
	mem, err := b.Allocate(n)
	if err != nil {
		t.Fatal(err)
	}
	base, err := b.Register(ctx, mem, host.RemoteReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	return mem, base
}

// TestCanceledWhileFailingOverEnds: a write whose plugin crashes under
// its slices is taken by failover, which waits out its backoff; the
// task is canceled meanwhile. Its slices were on the crashed run and
// will never come back, so it must end CANCELED (once the target
// confirmed the dead run's fence), not stay PENDING while the plugin's
// next run is blamed for holding it and killed (supervise.end_grace).
func TestCanceledWhileFailingOverEnds(t *testing.T) {
	const span = 128 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := failoverConfig("cfo-a", true, true) + "transfer {\n  retry_backoff = \"1s\"\n}\nsupervise {\n  end_grace = \"300ms\"\n}\n"
	a := hclEngine(t, context.Background(), cfg, "cfo-a.hcl")
	b, seg := failoverSegment(t, ctx, a, "cfo-b", span)
	local := randomLocal(t, ctx, a, span)
	id, err := a.AllocateBatch(1)
	if err != nil {
		t.Fatal(err)
	}
	defer a.FreeBatch(id)
	if err := a.Submit(id, host.Request{Op: host.Write, Local: local, Segment: seg.ID, Remote: b.Ready.Buffers[0].Base}); err != nil {
		t.Fatal(err)
	}
	// Failover took the failed attempt once it is listed as retried.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		st := a.Status(ctx, host.SkipPluginCounters())
		if slices.ContainsFunc(st.Failures, func(f host.Failure) bool { return f.Retried }) {
			break
		}
		if ts, _ := a.TaskStatus(id, 0); ts.State != host.StatePending || time.Now().After(deadline) {
			t.Fatalf("the crash was not taken for failover: task %+v, failures %+v", ts, st.Failures)
		}
	}
	if err := a.CancelTask(id, 0); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := a.Wait(wctx, id); err != nil {
		ts, _ := a.TaskStatus(id, 0)
		t.Fatalf("a task canceled while failing over did not end: %v (task %+v, fault plugin %+v)", err, ts, pluginStatus(a, "fault"))
	}
	if ts, _ := a.TaskStatus(id, 0); ts.State != host.StateCanceled && ts.State != host.StateCompleted {
		t.Fatalf("task %+v, want CANCELED (or COMPLETED, had the retry won)", ts)
	}
	if st := pluginStatus(a, "fault"); strings.Contains(st.LastExit, "held slices") {
		t.Errorf("the fault plugin's next run was killed for the canceled task's slices: %s", st.LastExit)
	}
}

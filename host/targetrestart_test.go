package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host"
)

// Issue 26.4: kill -9 of the target's shm plugin, under traffic. A slice
// the target refuses while its plugin restarts (its registrations not
// replayed yet, its old socket gone, a mapping dropped with the
// connection) is a failure another attempt fixes once the target is
// back: it is retried within the task's deadline and the retry budget,
// and never ends FAILED.

// targetSpan is the peer's exposed memory: room for 16 MiB copies, which
// shm cuts into chunks handed to several workers.
const targetSpan = 32 << 20

// peerPlugin is one line of the peer's `plugins` answer.
type peerPlugin struct {
	Name     string `json:"name"`
	State    string `json:"state"`
	PID      int    `json:"pid"`
	Restarts uint64 `json:"restarts"`
}

func (p *peer) plugin(t *testing.T, name string) peerPlugin {
	t.Helper()
	var ps []peerPlugin
	if err := json.Unmarshal([]byte(p.ask(t, "plugins")), &ps); err != nil {
		t.Fatalf("peer's plugins: %v", err)
	}
	for _, x := range ps {
		if x.Name == name {
			return x
		}
	}
	t.Fatalf("peer runs no plugin %q: %+v", name, ps)
	return peerPlugin{}
}

// outcome is how one task ended.
type outcome struct {
	req      string
	state    host.State
	err      error
	attempts int
}

// TestTargetSHMRestartFailsNoTask kills the target's shm plugin five
// times under writes and reads of 4 KiB to 16 MiB, unpinned and pinned
// to shm or tcp, each with a deadline: every task ends COMPLETED, or
// TIMEOUT at its deadline; none ends FAILED (as "memory not registered"
// did, a status no failover took).
func TestTargetSHMRestartFailsNoTask(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a := hclEngine(t, ctx, killConfig("tgt-a", false)+"transfer {\n  retry_budget = \"10s\"\n}\n", "tgt.hcl")
	b := startPeer(t, "--name", "tgt-b", "--metastore", a.MetastoreURL(), "--expose", fmt.Sprint(targetSpan))
	seg, err := a.OpenSegment(ctx, "tgt-b")
	if err != nil {
		t.Fatal(err)
	}
	remote := b.Ready.Buffers[0].Base
	local := randomLocal(t, ctx, a, targetSpan)

	var (
		mu    sync.Mutex
		ended []outcome
		wg    sync.WaitGroup
	)
	tctx, stop := context.WithCancel(ctx)
	sizes := []int{4 << 10, 1 << 20, 5 << 20, 16 << 20}
	pins := []string{"shm", "", "shm", "tcp"}
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; tctx.Err() == nil; i++ {
				n, pin := sizes[i%len(sizes)], pins[(i/len(sizes)+g)%len(pins)]
				op := []host.Op{host.Write, host.Read}[(i/2)%2]
				off := (g * 8 << 20) % (targetSpan - n + 1)
				req := host.Request{Op: op, Local: local[off : off+n], Segment: seg.ID, Remote: remote + uint64(off),
					Transport: pin, Deadline: time.Now().Add(8 * time.Second)}
				bid, err := a.AllocateBatch(1)
				if err != nil {
					t.Error(err)
					return
				}
				if err := a.Submit(bid, req); err != nil {
					mu.Lock()
					ended = append(ended, outcome{req: fmt.Sprintf("%v %d pinned %q", op, n, pin), state: host.StateFailed, err: fmt.Errorf("submit: %w", err)})
					mu.Unlock()
					a.FreeBatch(bid)
					continue
				}
				a.Wait(context.Background(), bid)
				st, _ := a.TaskStatus(bid, 0)
				a.FreeBatch(bid)
				mu.Lock()
				ended = append(ended, outcome{req: fmt.Sprintf("%v %d pinned %q", op, n, pin), state: st.State, err: st.Err, attempts: st.Attempts})
				mu.Unlock()
			}
		}()
	}

	// moved waits until 30 more tasks ended: traffic runs before each
	// kill and after the last restart.
	moved := func() {
		mu.Lock()
		from := len(ended)
		mu.Unlock()
		for limit := time.Now().Add(30 * time.Second); ; {
			mu.Lock()
			n := len(ended)
			mu.Unlock()
			if n >= from+30 {
				return
			}
			if time.Now().After(limit) {
				t.Fatalf("only %d tasks ended within 30s", n-from)
			}
			time.Sleep(5 * time.Millisecond) // poll interval of the condition above
		}
	}
	for k := range 5 {
		moved()
		st := b.plugin(t, "shm")
		if st.State != "running" || st.PID <= 0 {
			t.Fatalf("peer's shm before kill %d: %+v", k, st)
		}
		if err := syscall.Kill(st.PID, syscall.SIGKILL); err != nil {
			t.Fatalf("kill -9 the peer's shm plugin %d: %v", st.PID, err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			now := b.plugin(t, "shm")
			if now.State == "running" && now.Restarts > st.Restarts {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("peer's shm not back within 30s: %+v", now)
			}
			time.Sleep(20 * time.Millisecond) // poll interval of the condition above
		}
	}
	moved()
	stop()
	wg.Wait()

	counts := map[host.State]int{}
	var bad []string
	retried := 0
	for _, o := range ended {
		counts[o.state]++
		if o.attempts > 1 {
			retried++
		}
		switch {
		case o.state == host.StateCompleted:
		case o.state == host.StateTimeout && errors.Is(o.err, host.ErrDeadlineExceeded):
		default:
			bad = append(bad, fmt.Sprintf("%s: %v: %v", o.req, o.state, o.err))
		}
	}
	t.Logf("%d tasks: %v; %d failed over", len(ended), counts, retried)
	if len(bad) > 0 {
		t.Fatalf("%d tasks ended neither COMPLETED nor by their deadline:\n%s", len(bad), strings.Join(bad, "\n"))
	}
	if retried == 0 {
		t.Fatal("no task was failed over: the kills hit no traffic, and the test tested nothing")
	}
}

// TestPinnedReadWaitsForTargetToOfferTransport: a read pinned to shm,
// submitted while the target's shm plugin is down and the target's
// descriptor (published meanwhile) leaves shm out, so that the handle
// opened then has no shm peer, is not refused with "transport hint shm
// cannot reach segment": it waits, within its deadline and the retry
// budget, until the target publishes shm again, and then completes.
func TestPinnedReadWaitsForTargetToOfferTransport(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := hclEngine(t, ctx, killConfig("away-a", false)+"transfer {\n  retry_budget = \"30s\"\n}\n", "away-a.hcl")
	// The target runs its shm plugin from a copy the test can take away,
	// so that its restarts fail until it is put back.
	shmBin := filepath.Join(t.TempDir(), "ferry-plugin-shm")
	if err := os.Link(filepath.Join(binDir, "ferry-plugin-shm"), shmBin); err != nil {
		t.Fatal(err)
	}
	b := hclEngine(t, ctx, tcpShmConfig("away-b", a.MetastoreURL(), fmt.Sprintf("\n  path = %q\n", shmBin), ""), "away-b.hcl")
	const n = 1 << 20
	mem, err := b.Allocate(n)
	if err != nil {
		t.Fatal(err)
	}
	fillRandom(mem)
	remote, err := b.Register(ctx, mem, host.RemoteReadWrite)
	if err != nil {
		t.Fatal(err)
	}

	// Take the target's shm away: killed, and its restarts fail.
	pid := host.PluginPID(b, "shm")
	if err := os.Rename(shmBin, shmBin+".away"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for limit := time.Now().Add(30 * time.Second); pluginStatus(b, "shm").State != "restarting"; {
		if time.Now().After(limit) {
			t.Fatalf("target's shm not seen down within 30s: %+v", pluginStatus(b, "shm"))
		}
		time.Sleep(5 * time.Millisecond) // poll interval of the condition above
	}
	// A registration publishes the target's descriptor, without shm.
	more, err := b.Allocate(4096)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Register(ctx, more, host.RemoteRead); err != nil {
		t.Fatal(err)
	}
	seg, err := a.OpenSegment(ctx, "away-b")
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(seg.Transports, "shm") {
		t.Fatalf("the segment offers %v while the target's shm is down; the test needs it left out", seg.Transports)
	}

	local := localBuffer(t, ctx, a, n)
	bid, err := a.AllocateBatch(1)
	if err != nil {
		t.Fatal(err)
	}
	defer a.FreeBatch(bid)
	if err := a.Submit(bid, host.Request{Op: host.Read, Local: local, Segment: seg.ID, Remote: remote, Transport: "shm", Deadline: time.Now().Add(time.Minute)}); err != nil {
		t.Fatalf("submit a read pinned to shm while the target's shm is down: %v", err)
	}
	if st, _ := a.TaskStatus(bid, 0); st.State != host.StatePending {
		t.Fatalf("read pinned to shm while the target does not offer it: %v (%v), want PENDING until it does", st.State, st.Err)
	}
	// Put it back: the target's shm restarts, the target publishes it,
	// and the read goes through it.
	if err := os.Rename(shmBin+".away", shmBin); err != nil {
		t.Fatal(err)
	}
	if err := a.Wait(ctx, bid); err != nil {
		t.Fatal(err)
	}
	st, _ := a.TaskStatus(bid, 0)
	if st.State != host.StateCompleted || st.Attempts != 2 {
		t.Fatalf("read pinned to shm: %v after %d attempts (%v), want COMPLETED on the second, once the target offers shm", st.State, st.Attempts, st.Err)
	}
	if !bytes.Equal(local, mem) {
		t.Fatal("the read's bytes differ from the target's")
	}
}

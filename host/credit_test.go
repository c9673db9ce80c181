package host_test

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/control"
)

// creditEngine starts an engine with no metastore, tcp on loopback and
// the credit block cr (zero: the defaults).
func creditEngine(t *testing.T, name string, cr config.Credit) *host.Engine {
	t.Helper()
	return loopEngine(t, name, func(c *config.Config) { c.QoS.Credit = cr })
}

// loopEngine starts an engine with no metastore and tcp on loopback,
// its default config changed by mod.
func loopEngine(t *testing.T, name string, mod func(*config.Config)) *host.Engine {
	t.Helper()
	cfg := config.Default(name)
	cfg.PluginDir = binDir
	cfg.Metastore = config.Metastore{Kind: config.MetastoreNone}
	mod(cfg)
	e, err := host.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// stopPlugin stops engine e's plugin name with SIGSTOP and returns the
// call that continues it; the test's cleanup continues it too.
func stopPlugin(t *testing.T, e *host.Engine, name string) (resume func()) {
	t.Helper()
	pid := pluginStatus(e, name).PID
	if pid == 0 {
		t.Fatalf("no pid for engine %s's %s plugin", e.Name(), name)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resume = func() { syscall.Kill(pid, syscall.SIGCONT) }
	t.Cleanup(resume)
	return resume
}

// smallCredit lets one 1 MiB slice at a time go (the initial window is
// below one slice) and asks for grants every millisecond.
var smallCredit = config.Credit{InitialBytes: 256 << 10, MaxBytes: 2 << 20, InitialRequests: 2, MaxRequests: 8, Interval: time.Millisecond}

func creditAt(e *host.Engine, segment string) (host.CreditStats, bool) {
	for _, s := range quick(e).Credit {
		if s.Segment == segment {
			return s, true
		}
	}
	return host.CreditStats{}, false
}

// TestCreditMetersTCP: writes over tcp take the receiver's credit; with
// a small window the sender waits for it (more slices than the window
// holds are submitted), asks the receiver, which grants within
// max_bytes; every byte lands; and once the tasks completed no credit is
// in use.
func TestCreditMetersTCP(t *testing.T) {
	const n = 24 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, b := creditEngine(t, "cr-a", smallCredit), creditEngine(t, "cr-b", smallCredit)
	la := localBuffer(t, ctx, a, n)
	copy(la, pattern(n, 0, 5))
	lb, rb := remoteBuffer(t, ctx, b, n)
	seg := openByControl(t, a, b)
	var st host.CreditStats
	for round := 0; ; round++ {
		clear(lb)
		if err := a.Transfer(ctx, host.Request{Op: host.Write, Transport: "tcp", Local: la, Segment: seg.ID, Remote: rb}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(lb, la) {
			t.Fatal("the receiver's bytes differ")
		}
		var ok bool
		if st, ok = creditAt(a, "cr-b"); !ok {
			t.Fatalf("no credit at cr-b: %+v", quick(a).Credit)
		}
		if st.Grants > 0 || round == 20 {
			break // a grant came (the keeper asks every millisecond while credit is in use)
		}
	}
	if st.Waits == 0 {
		t.Errorf("no slice waited for credit with a window below one slice: %+v", st)
	}
	if st.Grants == 0 {
		t.Errorf("the receiver granted nothing in 20 writes: %+v", st)
	}
	if st.InUse != 0 || st.InFlight != 0 {
		t.Errorf("credit still in use after every task completed: %+v", st)
	}
	if st.Window > 2<<20 || st.Refused != 0 {
		t.Errorf("window %d above the receiver's max_bytes, or grants refused: %+v", st.Window, st)
	}
}

// TestCreditRefusesTooLargeGrant: a receiver configured to grant more
// than the sender's max_bytes and max_requests: the sender refuses every
// such grant, keeps its window within its own maximum, and still moves
// the bytes.
func TestCreditRefusesTooLargeGrant(t *testing.T) {
	const n = 8 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The receiver's first grant is its initial 64 requests, above the
	// sender's max_requests of 8. Its target delay is the longest there
	// is, so that a drain rate measured low on a loaded machine does not
	// halve its grants down into what the sender may accept.
	a, b := creditEngine(t, "crg-a", smallCredit), creditEngine(t, "crg-b", config.Credit{TargetDelay: config.MaxCreditTargetDelay})
	la := localBuffer(t, ctx, a, n)
	lb, rb := remoteBuffer(t, ctx, b, n)
	seg := openByControl(t, a, b)
	var st host.CreditStats
	for round := 0; round < 20 && st.Refused == 0; round++ {
		copy(la, pattern(n, 0, uint64(round)))
		if err := a.Transfer(ctx, host.Request{Op: host.Write, Transport: "tcp", Local: la, Segment: seg.ID, Remote: rb}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(lb, la) {
			t.Fatal("the receiver's bytes differ")
		}
		st, _ = creditAt(a, "crg-b")
	}
	if st.Refused == 0 || st.Grants != 0 {
		t.Errorf("%+v: want the too-large grants refused, none accepted", st)
	}
	if st.Window > uint64(smallCredit.MaxBytes) || st.Requests > uint32(smallCredit.MaxRequests) {
		t.Errorf("window %d bytes, %d requests: above the sender's maximum", st.Window, st.Requests)
	}
}

// TestCreditWaitBoundedByDeadline: a receiver whose tcp plugin stops
// (SIGSTOP) completes nothing, so no credit comes back: the sender's
// Submit waits for credit only until the request's deadline, and the
// task ends TIMEOUT; without credit for it, nothing waits forever.
func TestCreditWaitBoundedByDeadline(t *testing.T) {
	const n = 8 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, b := creditEngine(t, "crd-a", smallCredit), creditEngine(t, "crd-b", config.Credit{})
	la := localBuffer(t, ctx, a, n)
	_, rb := remoteBuffer(t, ctx, b, n)
	seg := openByControl(t, a, b)
	if err := a.Transfer(ctx, host.Request{Op: host.Write, Transport: "tcp", Local: la[:4096], Segment: seg.ID, Remote: rb}); err != nil {
		t.Fatal(err) // the connection is up before the receiver stops
	}
	resume := stopPlugin(t, b, "tcp")
	id, err := a.AllocateBatch(1)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(500 * time.Millisecond)
	if err := a.Submit(id, host.Request{Op: host.Write, Transport: "tcp", Local: la, Segment: seg.ID, Remote: rb, Deadline: deadline}); err != nil {
		t.Fatal(err)
	}
	if time.Now().Before(deadline) {
		if st, _ := creditAt(a, "crd-b"); st.Waits == 0 {
			t.Fatalf("Submit returned before the deadline without waiting for credit: %+v", st)
		}
	}
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	a.Wait(wctx, id)
	ts, _ := a.TaskStatus(id, 0)
	if ts.State != host.StateTimeout || !errors.Is(ts.Err, host.ErrDeadlineExceeded) {
		t.Errorf("task %+v, want TIMEOUT", ts)
	}
	if st, _ := creditAt(a, "crd-b"); st.Waits == 0 {
		t.Errorf("no slice waited for credit: %+v", st)
	}
	resume()
	a.FreeBatch(id)
	// The receiver drains again: a later write completes.
	if err := a.Transfer(ctx, host.Request{Op: host.Write, Transport: "tcp", Local: la, Segment: seg.ID, Remote: rb, Deadline: time.Now().Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
}

// TestCreditRestartReturns: a new incarnation of the receiver returns
// the credit the old one held (Resets), and writes to it go on.
func TestCreditRestartReturns(t *testing.T) {
	const n = 4 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, b := creditEngine(t, "crr-a", smallCredit), creditEngine(t, "crr-b", config.Credit{})
	la := localBuffer(t, ctx, a, n)
	_, rb := remoteBuffer(t, ctx, b, n)
	seg := openByControl(t, a, b)
	if err := a.Transfer(ctx, host.Request{Op: host.Write, Transport: "tcp", Local: la, Segment: seg.ID, Remote: rb}); err != nil {
		t.Fatal(err)
	}
	b.Close()
	b2 := creditEngine(t, "crr-b", config.Credit{})
	lb2, rb2 := remoteBuffer(t, ctx, b2, n)
	seg2 := openByControl(t, a, b2)
	copy(la, pattern(n, 0, 9))
	if err := a.Transfer(ctx, host.Request{Op: host.Write, Transport: "tcp", Local: la, Segment: seg2.ID, Remote: rb2}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(lb2, la) {
		t.Fatal("the new receiver's bytes differ")
	}
	st, _ := creditAt(a, "crr-b")
	if st.Resets == 0 || st.InUse != 0 {
		t.Errorf("after the receiver's restart: %+v, want a reset and nothing in use", st)
	}
}

// TestCreditBadInput: a real engine's control service refuses credit
// requests from a peer that holds no handle of it (another incarnation,
// another segment), unsigned or forged ones when it has a cluster
// secret, and a replayed request number.
func TestCreditBadInput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := newSecretEngine(t, "crb-b", "cluster_secret = \""+testSecret+"\"")
	good := dialControl(t, b.ControlAddr(), testSecret)
	ask := control.CreditAsk{From: "crb-a", FromIncarnation: 1, To: "crb-b", ToIncarnation: b.Incarnation(), Seq: 1, Limited: true}
	g, err := good.Credit(ctx, ask)
	if err != nil || g.Epoch != b.Incarnation() || g.Seq != 1 || g.Bytes != config.DefaultCreditInitialBytes+config.DefaultCreditInitialBytes/16 {
		t.Fatalf("a signed request from a holder of a handle: %+v, %v", g, err)
	}
	other := ask
	other.Seq = 2
	stale, wrongSeg := other, other
	stale.ToIncarnation = b.Incarnation() + 1
	wrongSeg.To = "crb-c"
	for _, tc := range []struct {
		name string
		c    *control.Client
		a    control.CreditAsk
		code codes.Code
	}{
		{"unsigned", dialControl(t, b.ControlAddr(), ""), other, codes.Unauthenticated},
		{"another secret", dialControl(t, b.ControlAddr(), "another-secret-0123456789abcdefgh"), other, codes.Unauthenticated},
		{"no handle: another incarnation", good, stale, codes.FailedPrecondition},
		{"no handle: another segment", good, wrongSeg, codes.FailedPrecondition},
		{"replayed request", good, ask, codes.FailedPrecondition},
	} {
		if _, err := tc.c.Credit(ctx, tc.a); status.Code(err) != tc.code {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.code)
		}
	}
}

// TestCreditSmallRuns: a batch of small tcp writes, or a block list's
// (unmerged), takes its receiver credit a run at a time where the window
// holds the run (the defaults: nobody waits), and a request at a time
// where it does not (a window of one bulk request: they wait); either
// way every byte lands and no credit is left in use once the tasks
// completed.
func TestCreditSmallRuns(t *testing.T) {
	const size, reqs = 4 << 10, 48 // within the default window's bulk share: 56 requests
	for _, c := range []struct {
		name   string
		cr     config.Credit
		wait   bool
		blocks bool
	}{{"defaults", config.Credit{}, false, false}, {"small", smallCredit, true, false},
		{"blocks/defaults", config.Credit{}, false, true}, {"blocks/small", smallCredit, true, true}} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			a, b := creditEngine(t, "crs-a", c.cr), creditEngine(t, "crs-b", config.Credit{})
			la := localBuffer(t, ctx, a, size*reqs)
			copy(la, pattern(size*reqs, 0, 11))
			lb, rb := remoteBuffer(t, ctx, b, size*reqs)
			seg := openByControl(t, a, b)
			id, err := a.AllocateBatch(reqs)
			if err != nil {
				t.Fatal(err)
			}
			defer a.FreeBatch(id)
			if c.blocks {
				layout := host.BlockLayout{BlockSize: size, Blocks: reqs}
				list, err := a.PrepareBlocks(seg.ID, la, layout, rb, layout)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := a.SubmitBlockRange(id, list, host.BlockRequest{Op: host.Write, Transport: "tcp", NoMerge: true}, 0, 0, reqs); err != nil {
					t.Fatal(err)
				}
			} else {
				rs := make([]host.Request, reqs)
				for i := range rs {
					rs[i] = host.Request{Op: host.Write, Transport: "tcp", Local: la[i*size : (i+1)*size], Segment: seg.ID, Remote: rb + uint64(i*size)}
				}
				if err := a.Submit(id, rs...); err != nil {
					t.Fatal(err)
				}
			}
			if err := a.Wait(ctx, id); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(lb, la) {
				t.Fatal("the receiver's bytes differ")
			}
			st, ok := creditAt(a, "crs-b")
			if !ok {
				t.Fatalf("no credit at crs-b: %+v", quick(a).Credit)
			}
			if st.InUse != 0 || st.InFlight != 0 {
				t.Errorf("credit still in use after every task completed: %+v", st)
			}
			if waited := st.Waits > 0; waited != c.wait {
				t.Errorf("waits %d with window %d bytes, %d requests: want waits %v", st.Waits, st.Window, st.Requests, c.wait)
			}
		})
	}
}

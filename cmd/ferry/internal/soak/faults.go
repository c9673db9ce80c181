package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// injectLoop injects one fault at a time, each after a random gap, until
// end is too near for the next to recover or MaxFaults are in.
func (r *runner) injectLoop(ctx context.Context, end time.Time) {
	rng := rand.New(rand.NewPCG(r.o.Seed, 0))
	for n := 0; r.o.MaxFaults == 0 || n < r.o.MaxFaults; n++ {
		if len(r.o.Kinds) == 0 {
			return
		}
		gap := r.o.GapMin + time.Duration(rng.Int64N(int64(r.o.GapMax-r.o.GapMin)+1))
		// Leave each fault time to recover before the end.
		if time.Now().Add(gap + r.o.GapMin/2).After(end) {
			return
		}
		if !sleepCtx(ctx, gap) {
			return
		}
		r.inject(ctx, rng, r.o.Kinds[rng.IntN(len(r.o.Kinds))])
	}
}

// inject injects one fault of kind and returns once it is over (a
// stopped plugin continued, a link up again, a restarted process ready).
func (r *runner) inject(ctx context.Context, rng *rand.Rand, kind string) {
	base, where, _ := strings.Cut(kind, ":")
	switch base {
	case KindKill, KindStop:
		r.pluginFault(ctx, rng, base, where)
	case KindRestartTarget:
		r.restartTarget(ctx)
	case KindRestartMetastore:
		if r.meta.c == nil { // an earlier restart failed: try again
			if err := r.meta.start(); err != nil {
				r.logf("metastore still down: %v", err)
				return
			}
		}
		down := 500*time.Millisecond + time.Duration(rng.Int64N(int64(2500*time.Millisecond)))
		ph := r.tally.Inject(Fault{Kind: kind, At: r.since(), Detail: fmt.Sprintf("pid %d, down %v", r.meta.c.pid(), down.Round(time.Millisecond))}, sampleSelf(r.since()))
		r.logf("fault: kill -9 of the metastore (pid %d), back in %v", r.meta.c.pid(), down.Round(time.Millisecond))
		r.meta.c.kill()
		sleepCtx(ctx, down)
		if err := r.meta.start(); err != nil {
			r.tally.FaultFailed(ph, err)
			r.logf("metastore did not come back: %v", err)
		}
	case KindSlowLink, KindDownLink:
		r.linkFault(ctx, kind)
	case KindUpgrade:
		r.upgradeFault(ctx, rng, where)
	}
}

// pluginFault kills or stops a plugin of a random side and transport,
// or of the ones where names ("target", "initiator/tcp", "target/shm").
func (r *runner) pluginFault(ctx context.Context, rng *rand.Rand, kind, where string) {
	side, plugin := r.pickPlugin(rng, where)
	pid, err := r.runningPID(ctx, side, plugin)
	f := Fault{Kind: fmt.Sprintf("%s %s/%s", kind, side, plugin), At: r.since(), Detail: fmt.Sprintf("pid %d", pid)}
	if kind == KindStop {
		f.Detail += fmt.Sprintf(" for %v", r.o.StopFor)
	}
	ph := r.tally.Inject(f, sampleSelf(r.since()))
	if err != nil {
		r.tally.FaultFailed(ph, err)
		r.logf("fault %s: %v", f.Kind, err)
		return
	}
	if kind == KindKill {
		r.logf("fault: kill -9 of the %s's %s plugin (pid %d)", side, plugin, pid)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			r.tally.FaultFailed(ph, err)
		}
		return
	}
	r.logf("fault: SIGSTOP of the %s's %s plugin (pid %d) for %v", side, plugin, pid, r.o.StopFor)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		r.tally.FaultFailed(ph, err)
		return
	}
	sleepCtx(context.Background(), r.o.StopFor) // never leave it stopped
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		r.logf("SIGCONT of pid %d: %v (its engine killed it meanwhile)", pid, err)
	} else {
		r.logf("SIGCONT of the %s's %s plugin (pid %d)", side, plugin, pid)
	}
}

// pickPlugin picks a side and one of the traffic's transports at random,
// or as where ("target", "initiator/tcp") narrows them.
func (r *runner) pickPlugin(rng *rand.Rand, where string) (side, plugin string) {
	side = []string{"initiator", "target"}[rng.IntN(2)]
	plugin = r.o.Transports[rng.IntN(len(r.o.Transports))]
	if where != "" {
		s, p, _ := strings.Cut(where, "/")
		if s != "" {
			side = s
		}
		if p != "" {
			plugin = p
		}
	}
	return side, plugin
}

// runningPID is pluginPID, given a moment when the plugin is restarting
// (no process); an error when it still runs none.
func (r *runner) runningPID(ctx context.Context, side, plugin string) (int, error) {
	pid, err := r.pluginPID(ctx, side, plugin)
	if err == nil && pid == 0 {
		sleepCtx(ctx, time.Second)
		pid, err = r.pluginPID(ctx, side, plugin)
		if err == nil && pid == 0 {
			err = fmt.Errorf("%s's %s plugin runs no process", side, plugin)
		}
	}
	return pid, err
}

// pluginPID is the pid of a side's plugin: the initiator's from its
// engine, the target's over its control stdin.
func (r *runner) pluginPID(ctx context.Context, side, plugin string) (int, error) {
	if side == "target" {
		r.tgt.mu.RLock()
		c := r.tgt.c
		r.tgt.mu.RUnlock()
		if c == nil {
			return 0, fmt.Errorf("the target engine is down")
		}
		ps, err := c.targetPlugins()
		if err != nil {
			return 0, err
		}
		for _, p := range ps {
			if p.Name == plugin {
				return p.PID, nil
			}
		}
		return 0, fmt.Errorf("the target engine runs no %s plugin", plugin)
	}
	got := make(chan int, 1)
	go func() {
		for _, p := range r.e.Status(ctx).Plugins {
			if p.Name == plugin {
				got <- p.PID
				return
			}
		}
		got <- -1
	}()
	select {
	case pid := <-got:
		if pid < 0 {
			return 0, fmt.Errorf("the initiator runs no %s plugin", plugin)
		}
		return pid, nil
	case <-time.After(10 * time.Second):
		return 0, fmt.Errorf("the initiator's Plugins did not return in 10s")
	}
}

// restartTarget kills the target engine with SIGKILL and starts it
// again: fresh memory (the model starts a new epoch), a new incarnation,
// the segment reopened.
func (r *runner) restartTarget(ctx context.Context) {
	r.tgt.mu.Lock()
	old, oldSeg := r.tgt.c, r.tgt.seg
	ph := r.tally.Inject(Fault{Kind: KindRestartTarget, At: r.since(), Detail: fmt.Sprintf("pid %d", old.pid())}, sampleSelf(r.since()))
	r.logf("fault: kill -9 of the target engine (pid %d), then a new one", old.pid())
	r.tgt.down = true
	old.kill()
	r.model.Reset()
	r.tgt.mu.Unlock()
	closeCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	r.e.CloseSegment(closeCtx, oldSeg)
	cancel()
	for attempt := 1; ; attempt++ {
		c, seg, base, err := r.startTarget(ctx)
		if err == nil {
			r.tgt.mu.Lock()
			r.tgt.c, r.tgt.seg, r.tgt.base, r.tgt.down = c, seg, base, false
			r.tgt.mu.Unlock()
			r.logf("target engine back (pid %d)", c.pid())
			return
		}
		r.tally.FaultFailed(ph, err)
		r.logf("target engine restart, attempt %d: %v", attempt, err)
		if attempt == 3 || !sleepCtx(ctx, time.Second) {
			r.notes = append(r.notes, fmt.Sprintf("the target engine could not be restarted: %v; no traffic after %v", err, r.since().Round(time.Second)))
			return
		}
	}
}

// linkFault slows the veth to SlowRate with tc tbf, or sets it down, for
// StopFor.
func (r *runner) linkFault(ctx context.Context, kind string) {
	n := r.o.Netns
	if n == nil {
		return
	}
	var on, off []string
	detail := fmt.Sprintf("%s for %v", n.VethA, r.o.StopFor)
	if kind == KindSlowLink {
		on = []string{"tc", "qdisc", "add", "dev", n.VethA, "root", "tbf", "rate", r.o.SlowRate, "burst", "32kbit", "latency", "400ms"}
		off = []string{"tc", "qdisc", "del", "dev", n.VethA, "root"}
		detail = r.o.SlowRate + " on " + detail
	} else {
		on = []string{"ip", "link", "set", n.VethA, "down"}
		off = []string{"ip", "link", "set", n.VethA, "up"}
	}
	ph := r.tally.Inject(Fault{Kind: kind, At: r.since(), Detail: detail}, sampleSelf(r.since()))
	r.logf("fault: %s (%s)", strings.Join(on, " "), r.o.StopFor)
	if out, err := exec.Command(on[0], on[1:]...).CombinedOutput(); err != nil {
		r.tally.FaultFailed(ph, fmt.Errorf("%s: %v: %s", strings.Join(on, " "), err, out))
		return
	}
	sleepCtx(context.Background(), r.o.StopFor)
	if out, err := exec.Command(off[0], off[1:]...).CombinedOutput(); err != nil {
		r.tally.FaultFailed(ph, fmt.Errorf("%s: %v: %s", strings.Join(off, " "), err, out))
	}
	r.logf("link %s restored", n.VethA)
}

// NetnsSetup makes two network namespaces joined by a veth pair, for a
// --netns run, and returns them with the function that removes them. It
// needs root and ip(8).
func NetnsSetup() (*Netns, func(), error) {
	if os.Geteuid() != 0 {
		return nil, nil, fmt.Errorf("--netns needs root (euid %d)", os.Geteuid())
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, nil, fmt.Errorf("--netns needs ip(8) (iproute2): %w", err)
	}
	tag := fmt.Sprint(os.Getpid() % 100000)
	sub := fmt.Sprintf("10.%d.%d", 230+os.Getpid()%20, os.Getpid()/20%250)
	n := &Netns{A: "ferry-soak-a-" + tag, B: "ferry-soak-b-" + tag, AddrA: sub + ".1", AddrB: sub + ".2",
		VethA: "fsa" + tag}
	vethB := "fsb" + tag
	cleanup := func() {
		exec.Command("ip", "netns", "del", n.A).Run()
		exec.Command("ip", "netns", "del", n.B).Run()
	}
	for _, args := range [][]string{
		{"netns", "add", n.A},
		{"netns", "add", n.B},
		{"-n", n.A, "link", "set", "lo", "up"},
		{"-n", n.B, "link", "set", "lo", "up"},
		{"link", "add", n.VethA, "netns", n.A, "type", "veth", "peer", "name", vethB, "netns", n.B},
		{"-n", n.A, "addr", "add", n.AddrA + "/24", "dev", n.VethA},
		{"-n", n.B, "addr", "add", n.AddrB + "/24", "dev", vethB},
		{"-n", n.A, "link", "set", n.VethA, "up"},
		{"-n", n.B, "link", "set", vethB, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			cleanup()
			return nil, nil, fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return n, cleanup, nil
}

// String is the --in-netns value that hands n to the soak re-run inside
// namespace A.
func (n *Netns) String() string {
	return strings.Join([]string{n.A, n.B, n.AddrA, n.AddrB, n.VethA}, ",")
}

// ParseNetns reads an --in-netns value.
func ParseNetns(s string) (*Netns, error) {
	f := strings.Split(s, ",")
	if len(f) != 5 {
		return nil, fmt.Errorf("--in-netns %q: want A,B,addrA,addrB,vethA", s)
	}
	return &Netns{A: f[0], B: f[1], AddrA: f[2], AddrB: f[3], VethA: f[4]}, nil
}

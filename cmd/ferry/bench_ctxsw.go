package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Context switches per request: how many times each process of a run
// went off a CPU (voluntary: it blocked, on a futex, a socket or a ring;
// nonvoluntary: it was preempted) per request of the timed window. A
// request that crosses from one process to another without a wakeup
// costs none; one that sleeps on the way costs one per hop.
//
// The bench's own process is counted with getrusage(RUSAGE_SELF), the
// only source that includes threads that exited. The other processes
// (plugins, the target engine, the tcp baseline's peer) are counted as
// the sum of /proc/<pid>/task/*/status over their threads: a process's
// own /proc/<pid>/status counts its main thread only. Go programs seldom
// end a thread, but the switches of one that ended inside the window are
// missed.

// procRef is one process whose switches a run counts: self, or a pid.
type procRef struct {
	name string
	pid  int // 0: this process
}

// ctxSnap is each process's total switches at one moment; a process
// that could not be read is absent.
type ctxSnap map[string]uint64

func snapCtx(procs []procRef) ctxSnap {
	s := make(ctxSnap, len(procs))
	for _, p := range procs {
		if n, err := procCtxSwitches(p.pid); err == nil {
			s[p.name] = n
		}
	}
	return s
}

// gone marks a process whose count a window could not take.
const gone = ^uint64(0)

// ctxCounter adds up the switches of procs over a run's timed windows.
type ctxCounter struct {
	procs []procRef
	start ctxSnap
	total map[string]uint64
}

func newCtxCounter(procs []procRef) *ctxCounter {
	return &ctxCounter{procs: procs, total: make(map[string]uint64)}
}

func (c *ctxCounter) begin() { c.start = snapCtx(c.procs) }

// end adds the switches since begin; a process that went away or was
// replaced (a plugin restarted: its count went down) adds nothing, and
// perRequest leaves it out.
func (c *ctxCounter) end() {
	now := snapCtx(c.procs)
	for name, n0 := range c.start {
		if c.total[name] == gone {
			continue
		}
		if n1, ok := now[name]; ok && n1 >= n0 {
			c.total[name] += n1 - n0
		} else {
			c.total[name] = gone
		}
	}
}

// perRequest is each process's switches per request over requests.
func (c *ctxCounter) perRequest(requests int) map[string]float64 {
	if c == nil || requests == 0 {
		return nil
	}
	out := make(map[string]float64, len(c.total))
	for name, n := range c.total {
		if n != gone {
			out[name] = float64(n) / float64(requests)
		}
	}
	return out
}

// procCtxSwitches is the voluntary and nonvoluntary switches of the
// process pid (0: this one) so far, all its threads together.
func procCtxSwitches(pid int) (uint64, error) {
	if pid == 0 {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			return 0, fmt.Errorf("getrusage: %w", err)
		}
		return uint64(ru.Nvcsw) + uint64(ru.Nivcsw), nil
	}
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	if err != nil || len(tasks) == 0 {
		return 0, fmt.Errorf("process %d: no /proc/%d/task (it exited?)", pid, pid)
	}
	var sum uint64
	read := 0
	for _, t := range tasks {
		n, err := taskCtxSwitches(t)
		if err != nil {
			continue // the thread ended between the glob and the read
		}
		sum += n
		read++
	}
	if read == 0 {
		return 0, fmt.Errorf("process %d: none of its %d threads' status could be read", pid, len(tasks))
	}
	return sum, nil
}

func taskCtxSwitches(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var sum uint64
	found := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "voluntary_ctxt_switches" && k != "nonvoluntary_ctxt_switches") {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %s: %w", path, k, err)
		}
		sum += n
		found++
	}
	if found != 2 {
		return 0, fmt.Errorf("%s has no voluntary_ctxt_switches and nonvoluntary_ctxt_switches lines", path)
	}
	return sum, nil
}

// targetPluginProcs asks the target engine bench started for its
// plugins' pids.
func targetPluginProcs(t *target) ([]procRef, error) {
	ans, err := t.ask("plugins")
	if err != nil {
		return nil, fmt.Errorf("ask the target engine for its plugins: %w", err)
	}
	var pl []pluginLine
	if err := json.Unmarshal([]byte(ans), &pl); err != nil {
		return nil, fmt.Errorf("the target engine's plugins line %q: %w", ans, err)
	}
	var out []procRef
	for _, p := range pl {
		if p.PID > 0 {
			out = append(out, procRef{name: "target-plugin:" + p.Name, pid: p.PID})
		}
	}
	return out, nil
}

// ctxSummary is one line of per-process figures, in a fixed order:
// the engine first, then its plugins, then the far side.
func ctxSummary(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	rank := func(k string) int {
		switch {
		case k == "engine" || k == "bench":
			return 0
		case strings.HasPrefix(k, "plugin:"):
			return 1
		case k == "target" || k == "peer":
			return 2
		}
		return 3
	}
	slices.SortFunc(keys, func(a, b string) int {
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	var sb strings.Builder
	for i, k := range keys {
		if i > 0 {
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "%s=%.3g", k, m[k])
	}
	return sb.String()
}

// ctxTotal is the switches per request of all processes together.
func ctxTotal(m map[string]float64) float64 {
	var s float64
	for _, v := range m {
		s += v
	}
	return s
}

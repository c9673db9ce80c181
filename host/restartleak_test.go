package host_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host"
)

// Issue 26.3: after a plugin restart the engine that owns the plugin holds
// the file descriptors and goroutines it held before it. A run's pidfd,
// go-plugin client, gRPC connection, fd socket, stderr forwarder, lanes
// (two ring memfds and a reaper each) and watchers are all released with
// the run.

// leakSpan is the peer's exposed memory and the largest write of the
// traffic: small, so that a round of traffic takes milliseconds.
const leakSpan = 4 << 20

// tcpShmConfig is an engine with tcp and shm (shm: the body of its
// plugin block, often empty) that uses the HTTP metastore at url, and
// extra top-level HCL.
func tcpShmConfig(name, url, shm, extra string) string {
	return fmt.Sprintf(`name = %q
plugin_dir = %q
metastore {
  kind = "http"
  url  = %q
}
plugin "tcp" {
  config {
    listen = ["127.0.0.1:0"]
  }
}
plugin "shm" {%s}
%s
`, name, binDir, url, shm, extra)
}

// startMetad runs `ferry metad` in a child process and returns its URL:
// with the metastore in a process of its own, the peer's connections to
// it are not counted among the engine's descriptors and goroutines.
func startMetad(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "ferry"), "metad", "--listen", "127.0.0.1:0")
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		t.Fatal("ferry metad exited before it served")
	}
	url, ok := strings.CutPrefix(sc.Text(), "ferry metad: serving ")
	if !ok {
		t.Fatalf("ferry metad said %q, not where it serves", sc.Text())
	}
	return url
}

// leakRig is an engine with tcp and shm, a peer in a child process, and
// traffic pinned to each transport in turn, counted per transport.
type leakRig struct {
	t      *testing.T
	a      *host.Engine
	seg    host.Segment
	remote uint64
	local  []byte
	done   map[string]*atomic.Uint64 // writes completed, per transport
	failed atomic.Uint64
	// metaPort is the metastore's: the engine's connections to it are
	// counted apart (see snapshot).
	metaPort int
}

func newLeakRig(t *testing.T, ctx context.Context, name, extra string) *leakRig {
	t.Helper()
	url := startMetad(t)
	a := hclEngine(t, ctx, tcpShmConfig(name+"-a", url, "", extra), name+".hcl")
	b := startPeer(t, "--name", name+"-b", "--metastore", url, "--expose", fmt.Sprint(leakSpan))
	seg, err := a.OpenSegment(ctx, name+"-b")
	if err != nil {
		t.Fatal(err)
	}
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatalf("metastore URL %s: %v", url, err)
	}
	return &leakRig{t: t, a: a, seg: seg, remote: b.Ready.Buffers[0].Base, local: randomLocal(t, ctx, a, leakSpan),
		done: map[string]*atomic.Uint64{"tcp": {}, "shm": {}}, metaPort: port}
}

// write writes n bytes pinned to transport, within 5 s.
func (r *leakRig) write(ctx context.Context, transport string, n int) error {
	err := r.a.Transfer(ctx, host.Request{Op: host.Write, Local: r.local[:n], Segment: r.seg.ID, Remote: r.remote,
		Transport: transport, Deadline: time.Now().Add(5 * time.Second)})
	if err == nil {
		r.done[transport].Add(1)
	} else {
		r.failed.Add(1)
	}
	return err
}

// warm moves a few writes over each transport, all of which must
// complete, and sends the peer a notification: everything built lazily
// for the engine's life exists, among them its control connection to the
// peer, which the credit keeper dials on its first ask otherwise.
func (r *leakRig) warm(ctx context.Context) {
	r.t.Helper()
	if err := r.a.Notify(ctx, r.seg.ID, "leak-warm", []byte("x")); err != nil {
		r.t.Fatalf("notify the peer: %v", err)
	}
	for _, tr := range []string{"tcp", "shm", "tcp", "shm"} {
		for _, n := range []int{4 << 10, leakSpan} {
			if err := r.write(ctx, tr, n); err != nil {
				r.t.Fatalf("write over %s: %v", tr, err)
			}
		}
	}
}

// traffic writes over tcp and shm in turn, sizes 4 KiB to leakSpan, on
// two goroutines, until the returned stop is called; stop waits for them.
func (r *leakRig) traffic(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sizes := []int{4 << 10, 64 << 10, 1 << 20, leakSpan}
			for i := g; ctx.Err() == nil; i++ {
				r.write(ctx, []string{"tcp", "shm"}[i%2], sizes[i%len(sizes)])
			}
		}()
	}
	return func() { cancel(); wg.Wait() }
}

// carried waits until transport completed a write after the call: the
// current run carries traffic.
func (r *leakRig) carried(transport string, bound time.Duration) {
	r.t.Helper()
	from := r.done[transport].Load()
	deadline := time.Now().Add(bound)
	for r.done[transport].Load() <= from {
		if time.Now().After(deadline) {
			r.t.Fatalf("no write completed over %s within %v (%d failed so far): %+v", transport, bound, r.failed.Load(), pluginStatus(r.a, transport))
		}
		time.Sleep(5 * time.Millisecond) // poll interval of the condition above
	}
}

// restarted waits until the named plugin runs with more restarts than
// before, under a bound, and returns its status.
func (r *leakRig) restarted(name string, before uint64, bound time.Duration) host.PluginStatus {
	r.t.Helper()
	st, err := waitPlugin(r.a, name, before, bound)
	if err != nil {
		r.t.Fatal(err)
	}
	return st
}

// snapshot is what the process holds: its open descriptors (what each
// refers to) and its goroutines (by their stack and where they were
// created), less the metastore client's keep-alive pool, counted apart.
//
// That pool is the one thing whose size follows how calls happened to
// overlap rather than what runs: net/http keeps up to
// http.DefaultMaxIdleConnsPerHost idle connections to the metastore, each
// a socket and two goroutines (persistConn's readLoop and writeLoop), and
// a publication that overlaps a lease renewal or a watch's listing opens
// a second one. It is checked against that bound instead.
type snapshot struct {
	fds        []string
	goroutines int
	stacks     map[string]int
	pool       int // sockets connected to the metastore
}

// takeSnapshot looks at the process; metaPort is the metastore's port.
func takeSnapshot(metaPort int) snapshot {
	s := snapshot{stacks: map[string]int{}}
	peers := socketPeers()
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil {
			continue // the directory's own descriptor, closed already
		}
		if ino, ok := strings.CutPrefix(l, "socket:["); ok && peers[strings.TrimSuffix(ino, "]")].port == metaPort {
			s.pool++
			continue
		}
		s.fds = append(s.fds, l)
	}
	sort.Strings(s.fds)
	var b bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&b, 2) // one stack per goroutine
	for _, g := range strings.Split(b.String(), "\n\n") {
		var fns []string
		for _, l := range strings.Split(g, "\n")[1:] {
			if l == "" || strings.HasPrefix(l, "\t") {
				continue
			}
			if i := strings.LastIndex(l, "("); i > 0 && !strings.HasPrefix(l, "created by ") {
				l = l[:i] // the arguments
			}
			if i := strings.Index(l, " in goroutine "); i > 0 {
				l = l[:i]
			}
			fns = append(fns, l)
		}
		k := strings.Join(fns, " < ")
		if k == "" || strings.Contains(k, "net/http.(*persistConn)") {
			continue
		}
		s.stacks[k]++
		s.goroutines++
	}
	return s
}

// socketPeer is a socket's addresses, from /proc/self/net.
type socketPeer struct {
	desc string // for messages
	port int    // the remote port of a TCP socket
}

// socketPeers maps the process's sockets, by inode, to their addresses.
func socketPeers() map[string]socketPeer {
	m := map[string]socketPeer{}
	for _, f := range []string{"tcp", "tcp6", "unix"} {
		b, _ := os.ReadFile("/proc/self/net/" + f)
		for _, l := range strings.Split(string(b), "\n")[1:] {
			x := strings.Fields(l)
			switch {
			case f == "unix" && len(x) >= 7:
				m[x[6]] = socketPeer{desc: "unix " + strings.Join(x[7:], " ")}
			case f != "unix" && len(x) >= 10:
				var port int
				if i := strings.LastIndexByte(x[2], ':'); i >= 0 {
					p, _ := strconv.ParseUint(x[2][i+1:], 16, 16)
					port = int(p)
				}
				m[x[9]] = socketPeer{desc: f + " " + x[1] + " -> " + x[2] + " state " + x[3], port: port}
			}
		}
	}
	return m
}

// memory reads the process's resident and shared-memory sizes, for the
// log: each lane's two rings are 512 KiB of shared memory at the default
// ring depth, mapped with MAP_POPULATE.
func memory() string {
	b, _ := os.ReadFile("/proc/self/status")
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") || strings.HasPrefix(l, "RssShmem:") {
			out = append(out, strings.Join(strings.Fields(l), " "))
		}
	}
	return strings.Join(out, ", ")
}

// fdNumbers are what differ between two descriptors of one kind.
var fdNumbers = regexp.MustCompile(`[0-9]+`)

// diff says what now holds beyond base.
func (now snapshot) diff(base snapshot) string {
	var b strings.Builder
	count := func(fds []string) map[string]int {
		m := map[string]int{}
		for _, l := range fds {
			m[fdNumbers.ReplaceAllString(l, "N")]++
		}
		return m
	}
	bf, nf := count(base.fds), count(now.fds)
	for _, k := range slices.Sorted(maps.Keys(nf)) {
		if nf[k] != bf[k] {
			fmt.Fprintf(&b, "  fds %+d %s\n", nf[k]-bf[k], k)
		}
	}
	was := map[string]bool{}
	for _, l := range base.fds {
		was[l] = true
	}
	peers := socketPeers()
	for _, l := range now.fds {
		if ino, ok := strings.CutPrefix(l, "socket:["); ok && !was[l] {
			fmt.Fprintf(&b, "  new %s: %s\n", l, peers[strings.TrimSuffix(ino, "]")].desc)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(now.stacks)) {
		if d := now.stacks[k] - base.stacks[k]; d > 0 {
			fmt.Fprintf(&b, "  goroutines %+d %s\n", d, k)
		}
	}
	fmt.Fprintf(&b, "  metastore connections: %d (at most %d idle kept)\n", now.pool, http.DefaultMaxIdleConnsPerHost)
	return b.String()
}

// settled waits, up to bound, for the process to hold no more descriptors
// and goroutines than base, and no more metastore connections than
// net/http keeps idle: what a run leaves behind ends asynchronously (a
// reaper's futex sleep, a gRPC connection's reader), within
// milliseconds. It fails the test with what is left over.
func (r *leakRig) settled(base snapshot, bound time.Duration, what string) snapshot {
	r.t.Helper()
	deadline := time.Now().Add(bound)
	for {
		now := takeSnapshot(r.metaPort)
		if len(now.fds) <= len(base.fds) && now.goroutines <= base.goroutines && now.pool <= http.DefaultMaxIdleConnsPerHost {
			return now
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: %d fds and %d goroutines, %d and %d before (after %v):\n%s", what,
				len(now.fds), now.goroutines, len(base.fds), base.goroutines, bound, now.diff(base))
		}
		time.Sleep(10 * time.Millisecond) // poll interval of the condition above
	}
}

// fault is one way to take a plugin down: SIGKILL, or SIGSTOP and the
// supervisor's stall kill.
type fault struct {
	name string
	sig  syscall.Signal
}

// down takes the named plugin down with f under the traffic and waits,
// under a bound, until it runs again and carries a write.
func (r *leakRig) down(name string, f fault) {
	r.t.Helper()
	r.carried(name, 10*time.Second)
	st := pluginStatus(r.a, name)
	if err := syscall.Kill(st.PID, f.sig); err != nil {
		r.t.Fatalf("%s %d (%s): %v", f.name, st.PID, name, err)
	}
	now := r.restarted(name, st.Restarts, 30*time.Second)
	if f.sig == syscall.SIGSTOP && now.Stalls <= st.Stalls {
		r.t.Fatalf("%s restarted without a stall kill: %+v", name, now)
	}
	r.carried(name, 10*time.Second)
}

// noLeakPerRestart takes tcp and shm down with f in turn under traffic,
// rounds times in all, and then checks that the engine holds no more
// descriptors and goroutines than before the first of them.
//
// The baseline is taken after one restart of each plugin: what the
// engine builds once for its life may first be built then (the credit
// keeper's control connection to the peer, dialled on its first ask),
// while everything a run holds is built again by every run. So a leak
// per run shows as rounds times something.
func noLeakPerRestart(t *testing.T, r *leakRig, f fault, rounds int) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r.warm(ctx)
	stop := r.traffic(ctx)
	r.down("tcp", f)
	r.down("shm", f)
	stop()
	r.warm(ctx)
	base := takeSnapshot(r.metaPort)
	t.Logf("before: %d fds, %d goroutines, %s", len(base.fds), base.goroutines, memory())

	stop = r.traffic(ctx)
	for i := range rounds {
		r.down([]string{"tcp", "shm"}[i%2], f)
	}
	stop()
	r.warm(ctx)
	what := fmt.Sprintf("after %d restarts (%s)", rounds, f.name)
	now := r.settled(base, 10*time.Second, what)
	t.Logf("%s: %d fds, %d goroutines, %s; %d writes failed while plugins restarted", what, len(now.fds), now.goroutines, memory(), r.failed.Load())
}

// TestPluginRestartLeaksNothing kills tcp and shm with SIGKILL in turn,
// six times, under traffic pinned to each, waiting each time for the
// plugin to run again and carry traffic; once the traffic stops, the
// engine holds no more descriptors and goroutines than before.
func TestPluginRestartLeaksNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	noLeakPerRestart(t, newLeakRig(t, ctx, "leak9", ""), fault{"kill -9", syscall.SIGKILL}, 6)
}

// TestPluginStallKillLeaksNothing stops tcp and shm with SIGSTOP in turn,
// four times, under traffic pinned to each: the supervisor finds each
// stalled, kills it and restarts it, and once the traffic stops the
// engine holds no more descriptors and goroutines than before.
func TestPluginStallKillLeaksNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := newLeakRig(t, ctx, "leakstop", `supervise {
  stall_after   = "300ms"
  probe_timeout = "200ms"
  interval      = "50ms"
}`)
	noLeakPerRestart(t, r, fault{"kill -STOP", syscall.SIGSTOP}, 4)
}

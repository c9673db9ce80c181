package host_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// netnsWorld is two network namespaces joined by two veth pairs, one per
// rail, each with its own /24; A's side of each pair is rate-limited with
// tbf so that the rails have known, different speeds.
type netnsWorld struct {
	a, b  string    // namespace names
	addrA [2]string // A's address on rail i
	addrB [2]string
}

// mustRun runs an iproute2/tc command; a failure fails the test.
func mustRun(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// missing skips the test for want of what the message names, or fails it
// under CI, which runs as root with iproute2 (.ci/run): there a skip
// would hide that rails on separate links went untested.
func missing(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// newNetnsWorld makes the namespaces and links, or skips the test where
// namespaces cannot be made (not root, no iproute2), except under CI,
// where that is a failure.
func newNetnsWorld(t *testing.T, mbit [2]int) *netnsWorld {
	t.Helper()
	if os.Geteuid() != 0 {
		missing(t, "network namespaces need root (euid %d): run the tests as root (CI does) to test rails on real separate links", os.Geteuid())
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing(t, "%s not found (apt-get install iproute2; .ci/run does): cannot make network namespaces", tool)
		}
	}
	id := os.Getpid() % 100000
	w := &netnsWorld{a: fmt.Sprintf("ferry-mr%d-a", id), b: fmt.Sprintf("ferry-mr%d-b", id)}
	if out, err := exec.Command("ip", "netns", "add", w.a).CombinedOutput(); err != nil {
		missing(t, "cannot create a network namespace here (%v: %s); rails on separate links are not tested", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", w.a).Run() })
	mustRun(t, "ip", "netns", "add", w.b)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", w.b).Run() })
	for _, ns := range []string{w.a, w.b} {
		mustRun(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	for i := range 2 {
		va, vb := fmt.Sprintf("fmr%da%d", id, i), fmt.Sprintf("fmr%db%d", id, i)
		w.addrA[i], w.addrB[i] = fmt.Sprintf("10.231.%d.1", i+1), fmt.Sprintf("10.231.%d.2", i+1)
		mustRun(t, "ip", "link", "add", va, "netns", w.a, "type", "veth", "peer", "name", vb, "netns", w.b)
		mustRun(t, "ip", "-n", w.a, "addr", "add", w.addrA[i]+"/24", "dev", va)
		mustRun(t, "ip", "-n", w.b, "addr", "add", w.addrB[i]+"/24", "dev", vb)
		mustRun(t, "ip", "-n", w.a, "link", "set", va, "up")
		mustRun(t, "ip", "-n", w.b, "link", "set", vb, "up")
		// A's egress on this rail: the direction writes travel.
		mustRun(t, "ip", "netns", "exec", w.a, "tc", "qdisc", "add", "dev", va, "root", "tbf",
			"rate", fmt.Sprintf("%dmbit", mbit[i]), "burst", "64kb", "latency", "100ms")
	}
	return w
}

// benchResult is the part of `ferry bench --json` this test reads.
type benchResult struct {
	Gbps  float64 `json:"gbps"`
	Bytes uint64  `json:"bytes"`
	Rails []struct {
		Label  string  `json:"label"`
		Bytes  uint64  `json:"bytes"`
		Share  float64 `json:"share"`
		EWMA   float64 `json:"ewma_gbps"`
		Errors uint64  `json:"errors"`
	} `json:"rails"`
}

// TestMultiRailTCPOverVeth runs two engines in two network namespaces
// joined by two links, the slow one throttled to a quarter of the fast
// one's rate. Writes sprayed over both rails put less than a third of the
// bytes on the slow rail, and move at least as much as the fast rail alone
// in the same run.
func TestMultiRailTCPOverVeth(t *testing.T) {
	const fast, slow = 400, 100 // Mbit/s
	w := newNetnsWorld(t, [2]int{fast, slow})
	dir := t.TempDir()
	cfgA := fmt.Sprintf(`name = "mr-a"
plugin_dir = %q
plugin "tcp" {
  config {
    listen         = ["%s:0", "%s:0"]
    cluster_secret = "multirail-test-secret-0123456789"
  }
}
rail "fast" {
  transport = "tcp"
  device    = "%s:0"
}
rail "slow" {
  transport = "tcp"
  device    = "%s:0"
}
policy "fast-only" {
  match {
    intents = ["migration"]
  }
  transports = ["tcp"]
  rails      = ["fast"]
}
`, binDir, w.addrA[0], w.addrA[1], w.addrA[0], w.addrA[1])
	cfgB := fmt.Sprintf(`name = "mr-b"
plugin_dir = %q
metastore {
  kind   = "embedded"
  listen = "%s:7070"
}
plugin "tcp" {
  config {
    listen         = ["%s:0", "%s:0"]
    cluster_secret = "multirail-test-secret-0123456789"
  }
}
`, binDir, w.addrB[0], w.addrB[0], w.addrB[1])
	fa, fb := filepath.Join(dir, "a.hcl"), filepath.Join(dir, "b.hcl")
	for f, s := range map[string]string{fa: cfgA, fb: cfgB} {
		if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ferry := filepath.Join(binDir, "ferry")

	const size = 16 << 20
	target := exec.Command("ip", "netns", "exec", w.b, ferry, "run", "--config", fb, "--expose", fmt.Sprint(2*size), "--control-stdin")
	target.Stderr = os.Stderr
	target.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := target.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := target.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		in.Close() // --control-stdin: EOF stops the engine
		target.Wait()
	}()
	if !bufio.NewScanner(out).Scan() {
		t.Fatal("target engine exited before it was ready")
	}

	bench := func(args ...string) benchResult {
		t.Helper()
		cmd := exec.Command("ip", append([]string{"netns", "exec", w.a, ferry, "bench", "--config", fa,
			"--target", "mr-b", "--metastore", fmt.Sprintf("http://%s:7070/metadata", w.addrB[0]),
			"--transport", "tcp", "--op", "write", "--size", fmt.Sprint(size), "--threads", "2", "--duration", "4s", "--warmup", "1s", "--json"}, args...)...)
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		timer := time.AfterFunc(2*time.Minute, func() { cmd.Process.Kill() }) // never hang the suite
		defer timer.Stop()
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("ferry bench %v: %v", args, err)
		}
		var r benchResult
		if err := json.Unmarshal(bytes.TrimSpace(b), &r); err != nil {
			t.Fatalf("ferry bench output %q: %v", b, err)
		}
		return r
	}
	alone := bench("--policy", "fast-only")
	both := bench()
	t.Logf("fast rail alone: %.4f GB/s; both rails: %.4f GB/s", alone.Gbps, both.Gbps)
	shares, ewma := map[string]float64{}, map[string]float64{}
	for _, r := range both.Rails {
		shares[r.Label], ewma[r.Label] = r.Share, r.EWMA
		t.Logf("rail %-4s bytes %d share %.3f EWMA %.3f Gb/s errors %d", r.Label, r.Bytes, r.Share, r.EWMA, r.Errors)
	}
	learnt := fmt.Sprintf("learnt bandwidths fast %.3f, slow %.3f Gb/s, links %.1f and %.1f", ewma["fast"], ewma["slow"], fast/1e3, slow/1e3)
	for _, r := range alone.Rails {
		if r.Label == "slow" && r.Bytes != 0 {
			t.Errorf("the fast-only policy put %d bytes on the slow rail", r.Bytes)
		}
	}
	if len(shares) != 2 || shares["fast"] == 0 || shares["slow"] == 0 {
		t.Fatalf("rails %+v: want both fast and slow carrying bytes", both.Rails)
	}
	// When these fail, look at the sprayer (host/rails), not at this test.
	// Measured for issue 10: past a slow share of 1/4 the slow rail sets
	// the pace and both rails move less than the fast one alone; failing
	// runs on a loaded 2-core machine had 0.26-0.28 (passing ones
	// 0.17-0.25), and one ended with the fast rail learnt at 1.08 Gb/s on
	// a 0.4 Gb/s link. The cause: the tcp plugin runs 2 connections per
	// rail, so completions arrive a few ms apart and a jittered reap (a
	// busy CPU) cuts busy time into short samples of wild rates, which the
	// sprayer weighed like long ones. It now weighs each sample by the busy
	// time it spans; rails.TestSprayParallelConnections simulates this
	// test's shape (before the fix, 2 connections with 1-5 ms jitter: slow
	// share 0.29-0.48, both/alone 0.52-0.85; after, 0.19-0.21 and
	// 1.20-1.25). Here, 4 busy loops beside the test on the loaded 2-core
	// machine, 6 runs after the fix: slow share 0.214-0.219, both/alone
	// 1.23-1.28; 4 runs before it: 0.19-0.28, 1.03-1.24, the fast rail
	// learnt at 0.51-1.77 Gb/s. The margins stay: they catch that defect,
	// not noise of the test.
	if shares["slow"] >= 1.0/3 {
		t.Errorf("the slow rail (a quarter of the fast one's rate) carried %.3f of the bytes, want less than a third (%s)", shares["slow"], learnt)
	}
	if both.Gbps < alone.Gbps {
		t.Errorf("both rails moved %.4f GB/s, less than the fast rail alone (%.4f GB/s); the slow rail carried %.3f of the bytes, past the 1/4 at which it sets the pace (%s)",
			both.Gbps, alone.Gbps, shares["slow"], learnt)
	}
}

package main_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/ferrydev/ferry/sdk/plugintest"
)

// netnsPair makes two network namespaces joined by links veth pairs,
// the k-th with addresses as[k] and bs[k] in a subnet of its own, and
// removes them when the test ends. It skips the test where namespaces
// cannot be made (not root, no ip), except under CI, where that is a
// failure.
func netnsPair(t *testing.T, links int) *nsPair {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil || os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatalf("two-namespace test needs root and ip(8) (iproute2): euid %d, %v", os.Geteuid(), err)
		}
		t.Skipf("needs root and ip(8) to make network namespaces (euid %d, %v)", os.Geteuid(), err)
	}
	tag := fmt.Sprintf("%d-%d", os.Getpid()%100000, nsCount.Add(1))
	nsA, nsB := "ferry-a-"+tag, "ferry-b-"+tag
	p := &nsPair{A: nsA, B: nsB}
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", nsA).Run()
		exec.Command("ip", "netns", "del", nsB).Run()
	})
	run("netns", "add", nsA)
	run("netns", "add", nsB)
	for _, ns := range []string{nsA, nsB} {
		run("-n", ns, "link", "set", "lo", "up")
	}
	for k := range links {
		subnet := fmt.Sprintf("10.%d.%d", 200+k, (int(nsCount.Load())*7+os.Getpid())%250)
		va, vb := fmt.Sprintf("fa%d-%s", k, tag), fmt.Sprintf("fb%d-%s", k, tag)
		if len(va) > 15 { // IFNAMSIZ
			va, vb = va[:15], vb[:15]
		}
		run("link", "add", va, "netns", nsA, "type", "veth", "peer", "name", vb, "netns", nsB)
		run("-n", nsA, "addr", "add", subnet+".1/24", "dev", va)
		run("-n", nsB, "addr", "add", subnet+".2/24", "dev", vb)
		run("-n", nsA, "link", "set", va, "up")
		run("-n", nsB, "link", "set", vb, "up")
		p.as, p.bs, p.vethB = append(p.as, subnet+".1"), append(p.bs, subnet+".2"), append(p.vethB, vb)
	}
	return p
}

// nsPair is two network namespaces A and B and the links between them:
// link k joins address as[k] in A to bs[k] on B's interface vethB[k].
type nsPair struct {
	A, B          string
	as, bs, vethB []string
}

// runInNetns starts `ferry run args...` in network namespace ns, stops it
// with SIGTERM when the test ends (printing its log if the test failed),
// and returns its stdout with the ready line read.
func runInNetns(t *testing.T, ns string, args ...string) *bufio.Scanner {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, filepath.Join(binDir, "ferry"), "run"}, args...)...)
	var logs plugintest.LogBuffer
	cmd.Stderr = &logs
	_, out := plugintest.StartPiped(t, cmd)
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("the engine in %s logged:\n%s", ns, logs.String())
		}
	})
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		t.Fatalf("the engine in %s exited before its ready line:\n%s", ns, logs.String())
	}
	return sc
}

// nsCount tells the namespaces of one test process apart.
var nsCount atomic.Int32

// exampleConfig writes config/examples/<name> with the README's
// addresses 10.0.0.1 and 10.0.0.2 replaced by a and b, and the test's
// plugin directory, and returns its path.
func exampleConfig(t *testing.T, name, a, b string) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "config", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.NewReplacer("10.0.0.1", a, "10.0.0.2", b).Replace(string(src))
	s = "plugin_dir = \"" + binDir + "\"\n" + s
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestTwoHostsOutOfTheBox: two engines in two network namespaces, which
// share /etc/machine-id as containers from one image do, configured only
// as the README's two-hosts section shows (config/examples/two-hosts-*),
// move verified data over tcp; explain says tcp, and the other namespace
// can ask the engine for its plugins through the control address it
// published.
func TestTwoHostsOutOfTheBox(t *testing.T) {
	ns := netnsPair(t, 1)
	nsA, nsB, a, b := ns.A, ns.B, ns.as[0], ns.bs[0]
	cfgA, cfgB := exampleConfig(t, "two-hosts-a.hcl", a, b), exampleConfig(t, "two-hosts-b.hcl", a, b)
	ferryBin := filepath.Join(binDir, "ferry")
	sc := runInNetns(t, nsA, "--config", cfgA, "--expose", "4MiB", "--log-level", "info")
	var ready struct {
		Control string `json:"control"`
		Buffers []struct {
			Length int `json:"length"`
		} `json:"buffers"`
	}
	if err := json.Unmarshal(sc.Bytes(), &ready); err != nil {
		t.Fatalf("ready line %q: %v", sc.Text(), err)
	}
	if !strings.HasPrefix(ready.Control, a+":") {
		t.Errorf("engine A publishes control address %q; want one on %s, which B can reach", ready.Control, a)
	}

	inB := func(args ...string) (string, error) {
		out, err := exec.Command("ip", append([]string{"netns", "exec", nsB, ferryBin}, args...)...).CombinedOutput()
		return string(out), err
	}
	// At debug level a plugin's own stderr (a panic, an exit's reason)
	// reaches the output this test prints when explain fails: it failed
	// once in CI with B's tcp plugin exiting at start, and said no more.
	explain, err := inB("explain", "--config", cfgB, "--segment", "host-a", "--op", "write", "--size", "64KiB", "--log-level", "debug")
	if err != nil {
		t.Fatalf("explain from B: %v\n%s", err, explain)
	}
	if !strings.Contains(explain, "tcp: taken") || strings.Contains(explain, "shm: taken") {
		t.Errorf("explain from B does not choose tcp:\n%s", explain)
	}
	// As the README shows it: B's config names A's metastore; no --metastore.
	bench, err := inB("bench", "--config", cfgB, "--target", "host-a",
		"--transport", "tcp", "--size", "64KiB", "--duration", "200ms", "--warmup", "50ms", "--no-baseline", "--json")
	if err != nil {
		t.Fatalf("bench from B against A: %v\n%s", err, bench)
	}
	if !strings.Contains(bench, `"verified":true`) {
		t.Errorf("bench from B did not verify the bytes:\n%s", bench)
	}
	// The README's doctor on the README's two hosts: nothing fails (shm,
	// which cannot reach another host, is not tried).
	if doctor, err := inB("doctor", "--config", cfgB, "--peer", "host-a"); err != nil || !strings.Contains(doctor, "not tried: shm reaches only engines on this machine") {
		t.Errorf("doctor --peer host-a from B: %v, want exit 0 with shm not tried:\n%s", err, doctor)
	}
	plugins, err := inB("plugins", "--engine", ready.Control, "--config", cfgB)
	if err != nil {
		t.Fatalf("ferry plugins --engine %s from B: %v\n%s", ready.Control, err, plugins)
	}
	if !strings.Contains(plugins, "tcp") || !strings.Contains(plugins, "running") {
		t.Errorf("ferry plugins --engine from B:\n%s", plugins)
	}
}

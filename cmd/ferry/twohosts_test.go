package main_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ferrydev/ferry/sdk/plugintest"
)

// netnsPair makes two network namespaces joined by a veth pair, with
// addresses a and b, and removes them when the test ends. It skips the
// test where namespaces cannot be made (not root, no ip), except under
// CI, where that is a failure.
func netnsPair(t *testing.T) (nsA, nsB, a, b string) {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil || os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatalf("two-namespace test needs root and ip(8) (iproute2): euid %d, %v", os.Geteuid(), err)
		}
		t.Skipf("needs root and ip(8) to make network namespaces (euid %d, %v)", os.Geteuid(), err)
	}
	id := os.Getpid() % 250
	nsA, nsB = fmt.Sprintf("ferry-th-a-%d", os.Getpid()), fmt.Sprintf("ferry-th-b-%d", os.Getpid())
	vethA, vethB := fmt.Sprintf("fthA%d", os.Getpid()), fmt.Sprintf("fthB%d", os.Getpid())
	a, b = fmt.Sprintf("10.250.%d.1", id), fmt.Sprintf("10.250.%d.2", id)
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
	run("link", "add", vethA, "netns", nsA, "type", "veth", "peer", "name", vethB, "netns", nsB)
	run("-n", nsA, "addr", "add", a+"/24", "dev", vethA)
	run("-n", nsB, "addr", "add", b+"/24", "dev", vethB)
	for _, ns := range []string{nsA, nsB} {
		run("-n", ns, "link", "set", "lo", "up")
	}
	run("-n", nsA, "link", "set", vethA, "up")
	run("-n", nsB, "link", "set", vethB, "up")
	return nsA, nsB, a, b
}

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
	nsA, nsB, a, b := netnsPair(t)
	cfgA, cfgB := exampleConfig(t, "two-hosts-a.hcl", a, b), exampleConfig(t, "two-hosts-b.hcl", a, b)
	ferryBin := filepath.Join(binDir, "ferry")

	cmd := exec.Command("ip", "netns", "exec", nsA, ferryBin, "run", "--config", cfgA, "--expose", "4MiB", "--log-level", "info")
	var logs plugintest.LogBuffer
	cmd.Stderr = &logs
	_, out := plugintest.StartPiped(t, cmd)
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("engine A log:\n%s", logs.String())
		}
	})
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		t.Fatalf("engine A exited before its ready line:\n%s", logs.String())
	}
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
	explain, err := inB("explain", "--config", cfgB, "--segment", "host-a", "--op", "write", "--size", "64KiB")
	if err != nil {
		t.Fatalf("explain from B: %v\n%s", err, explain)
	}
	if !strings.Contains(explain, "tcp: taken") || strings.Contains(explain, "shm: taken") {
		t.Errorf("explain from B does not choose tcp:\n%s", explain)
	}
	bench, err := inB("bench", "--config", cfgB, "--target", "host-a", "--metastore", "http://"+a+":7070/metadata",
		"--transport", "tcp", "--size", "64KiB", "--duration", "200ms", "--warmup", "50ms", "--no-baseline", "--json")
	if err != nil {
		t.Fatalf("bench from B against A: %v\n%s", err, bench)
	}
	if !strings.Contains(bench, `"verified":true`) {
		t.Errorf("bench from B did not verify the bytes:\n%s", bench)
	}
	plugins, err := inB("plugins", "--engine", ready.Control, "--config", cfgB)
	if err != nil {
		t.Fatalf("ferry plugins --engine %s from B: %v\n%s", ready.Control, err, plugins)
	}
	if !strings.Contains(plugins, "tcp") || !strings.Contains(plugins, "running") {
		t.Errorf("ferry plugins --engine from B:\n%s", plugins)
	}
}

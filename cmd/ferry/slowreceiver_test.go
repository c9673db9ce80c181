package main_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rssAnon returns the anonymous resident memory of process pid in bytes
// (the heap and the staging buffers; the mapped memfd regions a transfer
// writes into are RssShmem and are not counted).
func rssAnon(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("the receiver's tcp plugin (pid %d): %v", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("RssAnon %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no RssAnon in /proc/%d/status", pid)
	return 0
}

// TestSlowReceiver: a receiver behind a link slowed for real (tc tbf at
// 20 Mbit/s on the sender's side of the veth pair) while the sender
// submits batches of 12 MiB of writes, more than its receiver credit
// (8 MiB): the receiver's tcp plugin keeps its anonymous memory flat (it
// grows by less than 16 MiB while the sender waits), and every write,
// each with time left, completes with its bytes verified.
func TestSlowReceiver(t *testing.T) {
	ns := netnsPair(t, 1)
	if out, err := exec.Command("ip", "netns", "exec", ns.B, "tc", "qdisc", "add", "dev", ns.vethB[0], "root",
		"tbf", "rate", "20mbit", "burst", "32kbit", "latency", "400ms").CombinedOutput(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("tc tbf: %v\n%s", err, out)
		}
		t.Skipf("tc tbf: %v\n%s", err, out)
	}
	a, b := ns.as[0], ns.bs[0]
	cfgA, cfgB := exampleConfig(t, "two-hosts-a.hcl", a, b), exampleConfig(t, "two-hosts-b.hcl", a, b)
	ferryBin := filepath.Join(binDir, "ferry")
	sc := runInNetns(t, ns.A, "--config", cfgA, "--expose", "16MiB", "--log-level", "info")
	var ready struct {
		Control string `json:"control"`
	}
	if err := json.Unmarshal(sc.Bytes(), &ready); err != nil {
		t.Fatalf("ready line %q: %v", sc.Text(), err)
	}
	inB := func(args ...string) *exec.Cmd {
		return exec.Command("ip", append([]string{"netns", "exec", ns.B, ferryBin}, args...)...)
	}
	out, err := inB("plugins", "--engine", ready.Control, "--config", cfgB, "--json").Output()
	if err != nil {
		t.Fatalf("ferry plugins --engine: %v\n%s", err, out)
	}
	pid := 0
	for lines := bufio.NewScanner(bytes.NewReader(out)); lines.Scan(); {
		var st struct {
			Plugins []struct {
				Name string `json:"name"`
				PID  int    `json:"pid"`
			} `json:"plugins"`
		}
		if json.Unmarshal(lines.Bytes(), &st) == nil {
			for _, p := range st.Plugins {
				if p.Name == "tcp" {
					pid = p.PID
				}
			}
		}
	}
	if pid == 0 {
		t.Fatalf("no pid for the receiver's tcp plugin in:\n%s", out)
	}
	before := rssAnon(t, pid)

	bench := inB("bench", "--config", cfgB, "--target", "host-a", "--metastore", "http://"+a+":7070/metadata",
		"--transport", "tcp", "--op", "write", "--size", "1MiB", "--batch", "12", "--duration", "1s", "--warmup", "10ms", "--no-baseline", "--json")
	var benchOut bytes.Buffer
	bench.Stdout, bench.Stderr = &benchOut, &benchOut
	if err := bench.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- bench.Wait() }()
	peak, samples := before, 0
	tick := time.NewTicker(100 * time.Millisecond) // sampling the receiver while the sender waits, not synchronising
	defer tick.Stop()
	var berr error
wait:
	for {
		select {
		case berr = <-done:
			break wait
		case <-tick.C:
			peak = max(peak, rssAnon(t, pid))
			samples++
		}
	}
	if berr != nil {
		t.Fatalf("bench over the slow link: %v\n%s", berr, benchOut.String())
	}
	if !strings.Contains(benchOut.String(), `"verified":true`) {
		t.Errorf("bench did not verify the bytes:\n%s", benchOut.String())
	}
	if samples < 10 {
		t.Errorf("the transfer took %d samples of 100ms: the link was not slow (tbf not applied?)", samples)
	}
	t.Logf("receiver tcp plugin RssAnon: %d KiB before, %d KiB peak over %d samples", before>>10, peak>>10, samples)
	if grew := peak - before; grew > 16<<20 {
		t.Errorf("the receiver's tcp plugin grew by %d KiB of anonymous memory while the sender waited; want under 16 MiB", grew>>10)
	}
}
